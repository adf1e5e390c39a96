"""The documentation runs: its marked examples are executed, so it cannot rot.

In ``docs/*.md``:

- ``<!-- runnable -->`` before a fenced ``sh`` block: the block runs under
  ``bash -euo pipefail`` in a scratch directory holding a copy of
  ``examples/``, with a daemon serving ``examples/org`` on ``.state`` (so
  ``.state/rosterd.sock`` is the socket, as in a fresh checkout) and this
  venv's ``roster`` and ``python`` first on ``PATH``. It must exit 0 and
  print no JSON-RPC error.
- ``<!-- output -->`` before a fenced block right after a runnable one: the
  runnable block's stdout, exactly.
- ``<!-- exchange -->`` before a fenced block of ``> request`` and
  ``< reply`` lines: replayed on one socket connection; every reply must
  match, up to timestamps, the pid and run ids.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness import EXAMPLE_ORG, REPO, DaemonProcess

from rosterd.org import load_org

DOCS = REPO / "docs"
_MARKER = re.compile(r"<!-- (runnable|output|exchange) -->")
_FENCE = re.compile(r"```(\w*)")


@dataclass(frozen=True)
class Block:
    kind: str
    path: Path
    line: int
    language: str
    text: str
    output: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def _fenced_blocks(path: Path) -> list[tuple[int, str, str, str | None]]:
    """(line, language, text, marker) of every fenced block of a Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[tuple[int, str, str, str | None]] = []
    marker: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if (found := _MARKER.fullmatch(line.strip())) is not None:
            marker = found[1]
        elif (fence := _FENCE.fullmatch(line.strip())) is not None:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            blocks.append((i + 1, fence[1], "\n".join(lines[i + 1 : end]) + "\n", marker))
            marker = None
            i = end
        elif line.strip() and marker is not None:
            raise AssertionError(f"{path}:{i + 1}: <!-- {marker} --> must precede a fenced block")
        i += 1
    return blocks


def _marked(kind: str) -> list[Block]:
    found: list[Block] = []
    for path in sorted(DOCS.glob("*.md")):
        blocks = _fenced_blocks(path)
        for n, (line, language, text, marker) in enumerate(blocks):
            if marker != kind:
                continue
            after = blocks[n + 1] if n + 1 < len(blocks) else None
            output = after[2] if after is not None and after[3] == "output" else None
            found.append(Block(kind, path, line, language, text, output))
    return found


RUNNABLE = _marked("runnable")
EXCHANGES = _marked("exchange")


def test_the_docs_have_runnable_examples() -> None:
    # A marker lost in an edit would silently turn its example into prose.
    assert {b.path.name for b in RUNNABLE} >= {
        "contract.md",
        "protocol.md",
        "configuration.md",
        "frontend.md",
        "operations.md",
    }
    assert all(b.language == "sh" for b in RUNNABLE), [b.where for b in RUNNABLE]
    assert len(EXCHANGES) == 1


def _scratch(tmp_path: Path) -> Path:
    work = tmp_path / "checkout"
    shutil.copytree(REPO / "examples", work / "examples")
    return work


def _clean_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ROSTER_")
        and k not in {"RUNTIME_DIRECTORY", "NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID"}
    }
    # This venv's roster and python, as for a reader who activated theirs.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_runnable_example(block: Block, tmp_path: Path) -> None:
    if "socat" in block.text and shutil.which("socat") is None:
        pytest.fail("socat is not installed: apt-get install socat")
    work = _scratch(tmp_path)
    daemon = DaemonProcess(work / "examples" / "org", work / ".state").start()
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.text],
            cwd=work,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        code = daemon.stop()
    assert done.returncode == 0, f"{block.where} failed:\n{done.stdout}\n{done.stderr}"
    # socat exits 0 whatever the daemon answers: an error reply must fail too.
    assert '"error":{' not in done.stdout, f"{block.where}:\n{done.stdout}"
    if block.output is not None:
        assert done.stdout == block.output, block.where
    assert code == 0, daemon.log()


# Values that differ between runs; run ids are matched up instead.
_VOLATILE = re.compile(
    r'"(pid|version|at|created_at|filed_at|resolved_at|submitted_at|updated_at|ended_at'
    r'|config_loaded_at)":("[^"]*"|[0-9.e+-]+)'
)
_RUN_ID = re.compile(r"\b[sdt]-\d{8}-\d{6}-[0-9a-f]{6}\b")


def _normalised(line: str, ids: dict[str, str]) -> str:
    line = _RUN_ID.sub(lambda m: ids.get(m[0], m[0]), line)
    return _VOLATILE.sub(lambda m: f'"{m[1]}":_', line)


@pytest.mark.parametrize("block", EXCHANGES, ids=[b.where for b in EXCHANGES])
def test_the_documented_exchange_is_what_the_daemon_says(block: Block, tmp_path: Path) -> None:
    work = _scratch(tmp_path)
    daemon = DaemonProcess(work / "examples" / "org", work / ".state").start()
    to_actual: dict[str, str] = {}
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(30)
            sock.connect(str(daemon.socket))
            replies = sock.makefile("rb")
            for n, line in enumerate(block.text.splitlines(), block.line + 1):
                where = f"{block.path.relative_to(REPO)}:{n}"
                if line.startswith("> "):
                    request = _RUN_ID.sub(lambda m: to_actual.get(m[0], m[0]), line[2:])
                    sock.sendall(request.encode() + b"\n")
                    continue
                assert line.startswith("< "), f"{where}: a line starts with '> ' or '< '"
                expected = line[2:]
                actual = replies.readline().decode().rstrip("\n")
                for documented, real in zip(
                    _RUN_ID.findall(expected), _RUN_ID.findall(actual), strict=False
                ):
                    to_actual.setdefault(documented, real)
                to_doc = {real: documented for documented, real in to_actual.items()}
                assert _normalised(actual, to_doc) == _normalised(expected, {}), where
    finally:
        assert daemon.stop() == 0, daemon.log()


def _toml_blocks(path: Path) -> list[str]:
    return [text for _, language, text, _ in _fenced_blocks(path) if language == "toml"]


def test_the_complete_org_toml_of_the_configuration_reference_loads(tmp_path: Path) -> None:
    complete = [t for t in _toml_blocks(DOCS / "configuration.md") if "[connections." in t]
    assert len(complete) == 1
    org_dir = shutil.copytree(EXAMPLE_ORG, tmp_path / "org")
    (org_dir / "org.toml").write_text(complete[0])
    org = load_org(org_dir)
    assert org.engine_for("grace").kind == "openai"
    assert org.budget_for("ada").memory == 4000


def test_every_toml_snippet_in_the_docs_is_valid_toml() -> None:
    for path in sorted(DOCS.glob("*.md")):
        for text in _toml_blocks(path):
            tomllib.loads(text)


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'."""
    headings = [
        line.lstrip("#").strip()
        for _, line in _prose_lines(path)
        if line.startswith("#") and " " in line
    ]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """Lines outside fenced blocks."""
    prose: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            prose.append((n, line))
    return prose


@pytest.mark.parametrize("path", [REPO / "README.md", *sorted(DOCS.glob("*.md"))], ids=str)
def test_relative_links_point_at_files_and_headings_that_exist(path: Path) -> None:
    broken = []
    for n, line in _prose_lines(path):
        for target in _LINK.findall(line):
            if "://" in target:
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.is_relative_to(REPO) or not linked.exists():
                broken.append(f"{path.name}:{n}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{path.name}:{n}: {target} (no such heading)")
    assert broken == []
