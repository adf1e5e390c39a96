"""Prefix stability: did this compilation keep the cacheable prefix of the last?

Each compilation is compared, boundary by boundary, with the previous one of
the same worker and channel (the previous turn of a session, or the last run
before it). A changed boundary names the first block whose hash differs and
the cause the host can know from it. Pure, like the rest of the compiler.
"""

from __future__ import annotations

import msgspec

from ._blocks import CHANGE_CAUSE, SYSTEM_ORDER
from ._system import SystemPrompt
from ._trace import Boundary, BoundaryCheck


class PrefixState(msgspec.Struct, frozen=True):
    """What a compilation leaves behind for the next one to compare with."""

    run: str
    at: float
    engine_fingerprint: str
    blocks: tuple[tuple[str, str], ...]
    boundaries: tuple[Boundary, ...]


def prefix_state(system: SystemPrompt, run: str, at: float) -> PrefixState:
    return PrefixState(
        run=run,
        at=at,
        engine_fingerprint=system.engine_fingerprint,
        blocks=tuple((block.block, block.sha256) for block in system.blocks),
        boundaries=system.boundaries,
    )


def check_prefix(previous: PrefixState | None, system: SystemPrompt) -> tuple[BoundaryCheck, ...]:
    if previous is None:
        return tuple(BoundaryCheck(name=b.name, status="new") for b in system.boundaries)
    if previous.engine_fingerprint != system.engine_fingerprint:
        return tuple(
            BoundaryCheck(
                name=b.name, status="changed", cause="engine changed", previous_run=previous.run
            )
            for b in system.boundaries
        )
    before = dict(previous.blocks)
    old = {b.name: b.sha256 for b in previous.boundaries}
    checks = []
    changed: str | None = None
    for boundary in system.boundaries:
        if old.get(boundary.name) == boundary.sha256:
            checks.append(
                BoundaryCheck(name=boundary.name, status="stable", previous_run=previous.run)
            )
            continue
        if changed is None:
            # A prefix hash covers every block before it: the first block
            # whose own hash differs is what broke this and later boundaries.
            changed = next(
                (b.block for b in system.blocks if before.get(b.block) != b.sha256),
                SYSTEM_ORDER[-1],
            )
        checks.append(
            BoundaryCheck(
                name=boundary.name,
                status="changed",
                block=changed,
                cause=CHANGE_CAUSE.get(changed, "changed"),
                previous_run=previous.run,
            )
        )
    return tuple(checks)
