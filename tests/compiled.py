"""The compiler on one scope of an org, and what its tests read of a
compilation: the helpers the compiler's example tests share."""

from __future__ import annotations

import msgspec

from rosterd.compiler import (
    BlockTrace,
    Compilation,
    RunMeta,
    SystemPrompt,
    TurnInput,
    compile_run,
    compile_system,
)
from rosterd.org import Org, Surface

__all__ = ("META", "lines", "run", "system", "trace")

META = RunMeta(run="run-4f1c2e", turn=1, now=1_700_000_000.0)


def system(
    org: Org, surface: Surface, worker: str, channel: str | None, meta: RunMeta = META
) -> SystemPrompt:
    """The system part of *worker*'s runs on *surface* in *channel*."""
    return compile_system(org, org.scope(surface, worker, channel), meta)


def run(
    org: Org,
    surface: Surface,
    worker: str,
    channel: str | None,
    turn: TurnInput,
    meta: RunMeta = META,
) -> Compilation:
    """*turn* of *worker* on *surface* in *channel*, system part and all."""
    return compile_run(org, org.scope(surface, worker, channel), turn, meta)


def lines(compilation: Compilation, block: str) -> list[dict[str, object]]:
    """The input envelopes of *block*, decoded."""
    decoded = [msgspec.json.decode(line) for line in compilation.input_text.splitlines()]
    return [obj for obj in decoded if obj["block"] == block]


def trace(compilation: Compilation, name: str) -> BlockTrace:
    """The trace of block *name*."""
    return next(b for b in compilation.record.blocks if b.block == name)
