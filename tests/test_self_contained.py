"""The repository documents itself: no file refers to a path outside it."""

from __future__ import annotations

import re
from pathlib import Path

from harness import REPO

# Written so that this file does not match itself.
_OUTSIDE = re.compile(r"\.\./shared|SPEC\.md|SPEC \d|/wo[r]k/")
_NOT_OURS = {".git", ".venv", ".state", ".hypothesis", "build", "dist", "__pycache__"}


def _files(root: Path) -> list[Path]:
    found = []
    for path in sorted(root.iterdir()):
        if path.name in _NOT_OURS or path.name.endswith((".egg-info", "_cache")):
            continue
        if path.is_dir():
            found.extend(_files(path))
        elif path.is_file():
            found.append(path)
    return found


def test_the_walk_sees_the_whole_repository() -> None:
    names = {p.relative_to(REPO).as_posix() for p in _files(REPO)}
    assert {"README.md", "docs/contract.md", "rosterd/org/_config.py", "Makefile"} <= names


def test_no_file_refers_to_a_path_outside_the_repository() -> None:
    offending = []
    for path in _files(REPO):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                offending.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offending == []
