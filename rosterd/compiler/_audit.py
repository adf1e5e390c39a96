"""Which scopes of an org cannot compile: the one check start and reload share.

A mandatory block over budget (an identity, a purpose, the system part over
the total) breaks only the scopes that include it. The org is still good:
every other worker and channel runs, and each broken scope is listed so the
daemon can report it while only that scope's compilations fail.
"""

from __future__ import annotations

import msgspec

from .._errors import CompileError
from ..org import Org
from ._inputs import RunMeta
from ._system import compile_system

__all__ = ("OverBudget", "over_budget")


class OverBudget(msgspec.Struct, frozen=True):
    """One scope whose system part fails to compile, and why."""

    worker: str
    channel: str | None
    surface: str
    block: str
    size: int
    limit: int
    reason: str


def over_budget(org: Org) -> tuple[OverBudget, ...]:
    """Every scope the org allows whose system part is over a budget."""
    meta = RunMeta(run="check", turn=0, now=0.0)
    found: list[OverBudget] = []
    for scope in org.scopes():
        try:
            compile_system(org, scope, meta)
        except CompileError as exc:
            found.append(
                OverBudget(
                    worker=scope.worker,
                    channel=scope.channel,
                    surface=scope.surface.value,
                    block=exc.block,
                    size=exc.size,
                    limit=exc.limit,
                    reason=exc.reason,
                )
            )
    return tuple(found)
