"""The input part of a run or turn, fitted into what the total leaves.

The advisory blocks (``_advisory.ADVISORY``: memory, briefing, history,
backlog), then the message or task. The request is mandatory and never
truncated. The advisory blocks get room in ``ROOM_ORDER`` from what the
total leaves, each up to its own budget, so under pressure the last to get
room shrinks first: memory (lowest-ranked items go), then backlog and
history (oldest messages go; the backlog says how many), then briefing
(gates go, with a count; the continuation stays).
In a session, memory items and gates an earlier turn sent are left out
before any of that: the conversation holds them, so they cost no budget.
"""

from __future__ import annotations

import msgspec

from ..org import Org, RunScope, Surface
from ._advisory import ADVISORY, ROOM_ORDER, KeptWhole, advisory_trace
from ._blocks import Fitted, request_block
from ._inputs import TurnInput
from ._items import RunMeta
from ._system import SystemPrompt, compile_failure, compile_system
from ._tools import tools_block
from ._trace import (
    BlockTrace,
    BudgetTrace,
    CompileError,
    ContextRecord,
    RecordKind,
    context_record,
    sha256_text_and_head,
)

# The stored budget names the advisory blocks it always has; every block's
# size is also its own trace's ``rendered_chars``, which readers show.
_BUDGET_FIELDS = frozenset(BudgetTrace.__struct_fields__)


class Compilation(msgspec.Struct, frozen=True):
    """One successful compilation: the model input and its trace record."""

    system: SystemPrompt
    input_text: str
    record: ContextRecord


def compile_run(org: Org, scope: RunScope, turn: TurnInput, meta: RunMeta) -> Compilation:
    """A task or direct run: system and input compiled together, one record."""
    return compile_turn(compile_system(org, scope, meta), turn, meta)


def compile_turn(system: SystemPrompt, turn: TurnInput, meta: RunMeta) -> Compilation:
    """Compile fresh input against an already compiled (or frozen) system part."""
    scope = system.scope
    budget = system.budget
    system_chars = system.boundaries[2].offset
    kind: RecordKind = "turn" if scope.surface is Surface.SESSION else "run"
    prior = () if kind == "turn" else system.blocks

    request = request_block(scope, turn.text, turn.sender, meta, budget.task)
    advisory = budget.total - system_chars - request.rendered_chars
    over_own = request.rendered_chars > budget.task
    if over_own or advisory < 0:
        limit = budget.task if over_own else budget.total - system_chars
        reason = (
            f"a {request.block} is never truncated"
            if over_own
            else f"the system part takes {system_chars} of the total {budget.total}"
        )
        raise _failure(system, meta, prior, request, limit, reason)

    fitted: dict[str, Fitted] = {}
    room = advisory
    for spec in ROOM_ORDER:
        limit = spec.limit(budget)
        try:
            fitted[spec.name] = spec.fit(scope, turn, min(limit, room), budget)
        except KeptWhole as exc:
            failed = advisory_trace(spec, turn, exc.fitted, limit)
            raise _failure(system, meta, prior, failed, exc.limit, exc.reason) from None
        room -= fitted[spec.name].chars

    lead, *rest = ADVISORY
    lead_content = "".join(fitted[lead.name].lines)
    input_text = (
        lead_content + "".join("".join(fitted[spec.name].lines) for spec in rest) + request.content
    )
    # The leading block's digest is a step of hashing the input.
    lead_sha256, input_sha256 = sha256_text_and_head(input_text, len(lead_content))
    blocks = (
        *(
            advisory_trace(
                spec,
                turn,
                fitted[spec.name],
                spec.limit(budget),
                lead_sha256 if spec is lead else None,
            )
            for spec in ADVISORY
        ),
        request,
    )
    used = system_chars + len(input_text)
    record = context_record(
        kind,
        scope,
        meta,
        system.engine_fingerprint,
        (*prior, *blocks),
        route_key=system.route_key,
        input_sha256=input_sha256,
        boundaries=system.boundaries,
        budget=BudgetTrace(
            total=budget.total,
            system=system_chars,
            request=request.rendered_chars,
            advisory=advisory,
            used=used,
            **{name: block.chars for name, block in fitted.items() if name in _BUDGET_FIELDS},
        ),
        tools=tools_block(system.tools) if kind == "run" else None,
    )
    return Compilation(system=system, input_text=input_text, record=record)


def _failure(
    system: SystemPrompt,
    meta: RunMeta,
    prior: tuple[BlockTrace, ...],
    block: BlockTrace,
    limit: int,
    reason: str,
) -> CompileError:
    kind: RecordKind = "turn" if system.scope.surface is Surface.SESSION else "run"
    return compile_failure(
        system.engine_fingerprint, system.scope, meta, kind, prior, block, limit, reason
    )
