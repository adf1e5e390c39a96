"""Which scopes of an org compile: the one dry run ``roster check``, start and reload share.

Every scope the org allows (worker x channel x surface, and a direct run per
worker) is compiled as the daemon would compile it, with empty stores and an
empty message: the least a message or task can be, its envelope alone, so
what does not fit is the org's to fix, not a sample message's. A mandatory
block over budget (an identity, a purpose, the system part over the total,
a ``task`` budget no message fits) breaks only the scopes that include it.
The org is still good: every other worker and channel runs, and each broken
scope is listed so the daemon can report it while only that scope's
compilations fail.
"""

from __future__ import annotations

import msgspec

from ..org import Org, RunScope, Surface
from ._blocks import REQUEST_BLOCKS
from ._inputs import TurnInput
from ._items import RunMeta
from ._system import compile_system
from ._trace import BlockTrace, CompileError
from ._turn import compile_run, compile_turn


class OverBudget(msgspec.Struct, frozen=True):
    """One scope whose system part fails to compile, and why."""

    worker: str
    channel: str | None
    surface: str
    block: str
    size: int
    limit: int
    reason: str


class DryRun(msgspec.Struct, frozen=True):
    """One scope compiled with empty stores: its blocks, and the failure if any.

    ``source`` names what to edit so the scope compiles: the file the
    failing block's text comes from, or for the message or task, the
    budget it is over (``context.task``, ``workers.<name>.context.total``).
    """

    scope: RunScope
    blocks: tuple[BlockTrace, ...]
    used: int | None
    error: CompileError | None = None
    source: str | None = None


def dry_run(org: Org) -> tuple[DryRun, ...]:
    """Every scope the org allows, compiled as its first turn would be."""
    return tuple(_compile(org, scope) for scope in org.scopes())


def over_budget(org: Org) -> tuple[OverBudget, ...]:
    """Every scope the org allows that cannot compile, and why."""
    return tuple(
        OverBudget(
            worker=run.scope.worker,
            channel=run.scope.channel,
            surface=run.scope.surface.value,
            block=run.error.block,
            size=run.error.size,
            limit=run.error.limit,
            reason=run.error.reason,
        )
        for run in dry_run(org)
        if run.error is not None
    )


def _compile(org: Org, scope: RunScope) -> DryRun:
    meta = RunMeta(run="check", turn=1, now=0.0)
    # A fresh session's first turn carries history; an empty channel log is
    # what a new deployment starts with.
    session = scope.surface is Surface.SESSION
    turn = TurnInput(text="", sender="check", history=() if session else None)
    system_blocks: tuple[BlockTrace, ...] = ()
    try:
        if session:
            system = compile_system(org, scope, meta)
            system_blocks = system.blocks
            record = compile_turn(system, turn, meta).record
        else:
            record = compile_run(org, scope, turn, meta).record
    except CompileError as exc:
        failed = exc.record.blocks if exc.record is not None else ()
        if exc.block in REQUEST_BLOCKS:
            error, source = _request_failure(org, scope.worker, exc)
            return DryRun(scope, (*system_blocks, *failed), None, error, source)
        source = next((b.source for b in failed if b.status == "failed"), exc.block)
        return DryRun(scope, (*system_blocks, *failed), None, exc, source)
    used = record.budget.used if record.budget is not None else None
    return DryRun(scope, (*system_blocks, *record.blocks), used)


def _request_failure(org: Org, worker: str, exc: CompileError) -> tuple[CompileError, str]:
    """The dry run's empty message (or task) over a budget: the error as
    ``roster check`` says it, and the budget's key. Over ``task``, no
    message fits at all, which the compiler's reason (written for a real
    message) does not say; over ``total``, its reason names the system part."""
    if exc.size <= org.budget_for(worker).task:
        return exc, _budget_key(org, worker, "total")
    reason = f"its envelope alone, with no text: no {exc.block} fits"
    error = CompileError(
        block=exc.block, size=exc.size, limit=exc.limit, reason=reason, record=exc.record
    )
    return error, _budget_key(org, worker, "task")


def _budget_key(org: Org, worker: str, budget: str) -> str:
    """Where *worker*'s *budget* is set: its own context table, or ``[context]``."""
    if getattr(org.workers[worker].context, budget) is not None:
        return f"workers.{worker}.context.{budget}"
    return f"context.{budget}"
