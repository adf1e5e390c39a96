"""Org directories for tests: the one builder of generated orgs, and the
``[engine]`` lines that put an org on the provider simulator.

Tests that need the loaded ``Org`` call ``load_org`` on the path
``write_org`` returns. The example org (``examples/org``, the ``org_dir``
fixture) and the odd TOML of ``test_org_load.py`` and the compiler tests
are written by hand on purpose: those tests are about the files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator import Simulator

__all__ = ("filler", "simulated_engine", "write_org")

_WORDS = [
    "release",
    "review",
    "schedule",
    "customer",
    "backlog",
    "design",
    "metric",
    "incident",
    "rollout",
    "budget",
    "contract",
    "roadmap",
    "quality",
    "feedback",
    "support",
    "migration",
    "audit",
    "deploy",
]


def filler(seed: str, chars: int) -> str:
    """Deterministic prose of about *chars* characters, different per *seed*."""
    digest = hashlib.sha256(seed.encode()).digest()
    sentences: list[str] = []
    size = 0
    i = 0
    while size < chars:
        pick = [_WORDS[(digest[(i + k) % len(digest)] + i * k) % len(_WORDS)] for k in range(9)]
        sentence = f"{pick[0].capitalize()} {' '.join(pick[1:])}, always with care."
        sentences.append(sentence)
        size += len(sentence) + 1
        i += 1
    return "\n".join(sentences) + "\n"


def write_org(
    root: Path,
    *,
    workers: int | Sequence[str] = 1,
    channels: int = 1,
    engine: str = 'kind = "echo"',
    identity_chars: int = 6000,
    purpose_chars: int = 1500,
    worker: str = "",
    sections: str = "",
) -> Path:
    """Write an org at *root*: *workers* (``w0``, ``w1``, … or the names
    given), every one in channels ``c0``, ``c1``, …, on the ``[engine]``
    table *engine* (its TOML lines); *root*.

    Identities and purposes are *identity_chars* and *purpose_chars* of
    :func:`filler`. The first worker has a connection (``github``), so both
    the "connections present" and the "connections absent" (coinciding
    boundaries) shapes are there. *worker* is TOML lines every worker's table
    holds (``memory_scope = "off"``); *sections* is whole tables written
    after the rest (``[daemon]``, ``[gateway]``, ``[telemetry]``,
    ``[context]``, ``[workers.w0.context]``, prices).
    """
    names = [f"w{i}" for i in range(workers)] if isinstance(workers, int) else list(workers)
    lines = ["[engine]", engine, ""]
    for i, name in enumerate(names):
        keys = ['connections = ["github"]' if i == 0 else "", *([worker] if worker else [])]
        lines += [f"[workers.{name}]", *keys, ""]
        identity = root / "workers" / name / "identity.md"
        identity.parent.mkdir(parents=True, exist_ok=True)
        identity.write_text(f"# {name}\n" + filler(f"identity {name}", identity_chars))
    for c in range(channels):
        channel = f"c{c}"
        lines += [f"[channels.{channel}]", f"workers = {json.dumps(names)}", ""]
        purpose = root / "channels" / channel / "purpose.md"
        purpose.parent.mkdir(parents=True, exist_ok=True)
        purpose.write_text(f"# {channel}\n" + filler(f"purpose {channel}", purpose_chars))
    lines += [
        "[connections.github]",
        'hosts = ["api.github.com"]',
        'methods = ["GET", "POST"]',
        'env = "GITHUB_TOKEN"',
    ]
    if sections:
        lines += ["", sections]
    (root / "org.toml").write_text("\n".join(lines) + "\n")
    return root


def simulated_engine(
    sim: Simulator, kind: str = "openai", settings: str = "", *, model: str = "sim-1"
) -> str:
    """The ``[engine]`` lines of an engine of *kind* (``openai`` or
    ``anthropic``) on *sim*'s API of that kind, *settings* (TOML lines) after."""
    url = sim.anthropic_url if kind == "anthropic" else sim.openai_url
    table = f'kind = "{kind}"\nmodel = "{model}"\nbase_url = "{url}"'
    return f"{table}\n{settings}" if settings else table
