"""The input part of a run or turn, fitted into what the total leaves.

Order: memory, briefing, history, backlog (what others posted in the channel
since the session's previous turn), then the message or task. The request is
mandatory and never truncated. The advisory tail shrinks under pressure in a
fixed order: memory first (lowest-ranked items go), then history and backlog
(oldest messages go; the backlog says how many), then briefing (gates go,
with a count; the continuation stays).
In a session, memory items and gates an earlier turn sent are left out
before any of that: the conversation holds them, so they cost no budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from operator import attrgetter
from typing import TypeVar

import msgspec

from ..org import Org, RunScope, Surface
from ._blocks import (
    NO_HISTORY,
    Fitted,
    advisory_block,
    continuation_line,
    gate_line,
    gates_omitted_chars,
    gates_omitted_line,
    history_envelopes,
    memory_line,
    message_envelopes,
    messages_omitted_line,
    request_block,
)
from ._envelopes import Envelope, encodable, render_lines
from ._gates import gate_view
from ._inputs import TurnInput
from ._items import ChannelMessage, RunMeta
from ._memory import Ranked, memory_view
from ._shown import Held, held_memory, held_open_gates, unshown_gates
from ._system import SystemPrompt, compile_failure, compile_system
from ._tools import tools_block
from ._trace import (
    BlockTrace,
    BudgetTrace,
    CompileError,
    ContextRecord,
    NoteReason,
    PassedOver,
    PassOverReason,
    RecordKind,
    context_record,
    sha256_text_and_head,
)

__all__ = ("Compilation", "compile_run", "compile_turn")

_T = TypeVar("_T")
_filed = attrgetter("filed_at", "id")
# No envelope renders shorter than this, so a smaller remainder fits nothing.
_MIN_ENVELOPE = 24
# Notes the memory block passes over, too long for what is left, before
# it stops looking further down the ranking.
_PASS_OVER = 32
# What a memory line holds besides the note's id and text.
_MEMORY_LINE = len(memory_line("", ""))


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

    try:
        briefing = _fit_briefing(scope, turn, min(budget.briefing, advisory))
    except _ContinuationTooLarge as exc:
        failed = advisory_block("briefing", exc.fitted, budget.briefing)
        reason = "the continuation outcome is kept whole"
        raise _failure(system, meta, prior, failed, exc.limit, reason) from None
    history = _fit_history(
        turn, min(budget.history, advisory - briefing.chars), budget.history_messages
    )
    backlog = _fit_backlog(
        turn,
        min(budget.backlog, advisory - briefing.chars - history.chars),
        budget.backlog_messages,
    )
    taken = briefing.chars + history.chars + backlog.chars
    memory = _fit_memory(scope, turn, min(budget.memory, advisory - taken), budget.memory)

    after_memory = (
        advisory_block("briefing", briefing, budget.briefing),
        advisory_block("history", history, budget.history)
        if turn.history is not None
        else NO_HISTORY,
        advisory_block("backlog", backlog, budget.backlog),
        request,
    )
    memory_content = "".join(memory.lines)
    input_text = memory_content + "".join(block.content for block in after_memory)
    # Memory leads the input: its digest is a step of hashing the input.
    memory_sha256, input_sha256 = sha256_text_and_head(input_text, len(memory_content))
    blocks = (
        advisory_block("memory", memory, budget.memory, memory_sha256),
        *after_memory,
    )
    used = system_chars + len(input_text)
    record = context_record(
        kind,
        scope,
        meta,
        system.engine_fingerprint,
        (*prior, *blocks),
        route_key=system.route_key,
        system_sha256=system.sha256,
        input_sha256=input_sha256,
        boundaries=system.boundaries,
        budget=BudgetTrace(
            total=budget.total,
            system=system_chars,
            request=request.rendered_chars,
            advisory=advisory,
            memory=memory.chars,
            history=history.chars,
            briefing=briefing.chars,
            used=used,
            backlog=backlog.chars,
        ),
        tools=tools_block(system.tools) if kind == "run" else None,
    )
    return Compilation(system=system, input_text=input_text, record=record)


class _ContinuationTooLarge(Exception):
    def __init__(self, fitted: Fitted, limit: int) -> None:
        self.fitted = fitted
        self.limit = limit


def _fit_briefing(scope: RunScope, turn: TurnInput, cap: int) -> Fitted:
    head: list[str] = []
    raw = 0
    if turn.continuation is not None:
        c = turn.continuation
        head.append(continuation_line(c))
        raw += len(c.summary) + len(c.outcome) + len(c.note)
    head_chars = sum(map(len, head))
    if head_chars > cap:
        raise _ContinuationTooLarge(Fitted(head, head_chars, 1, 0, raw), cap)

    gates = gate_view(turn.gates, scope.worker)
    shown = turn.shown.gates if turn.shown is not None else {}
    resolved = sorted(
        (g for g in gates.resolved if g.channel is None or g.channel == scope.channel),
        key=_filed,
    )
    resolved_lines = [gate_line(g.id, g.summary, g.outcome, g.note) for g in resolved]
    resolved, resolved_lines, known = unshown_gates(resolved, resolved_lines, shown)
    held = Held() if turn.shown is None else held_open_gates(gates, scope.channel, turn.shown)
    open_count, open_raw = gates.totals(scope.channel)
    total = len(resolved) + open_count - len(held.known)
    raw += open_raw - held.raw_chars
    raw += sum(len(g.summary) + len(g.outcome or "") + len(g.note) for g in resolved)
    lines_to_fit: Iterable[str] = chain(
        resolved_lines,
        (
            gate_line(g.id, g.summary, None, "")
            for g in gates.open(scope.channel, held.ordinals, held.order)
        ),
    )
    # Keep the first gates (resolved, then oldest open) that fit together
    # with the note counting the rest. Every gate line is longer than that
    # note, so keeping one more never takes less room: the first that does
    # not fit ends it, and the gates after it are never rendered.
    lines: list[str] = []
    chars = head_chars
    if chars + gates_omitted_chars(total) <= cap:
        for line in lines_to_fit:
            if chars + len(line) + gates_omitted_chars(total - len(lines) - 1) > cap:
                break
            lines.append(line)
            chars += len(line)
    kept = len(lines)
    omitted_line = ""
    if kept < total and chars + gates_omitted_chars(total - kept) <= cap:
        omitted_line = gates_omitted_line(total - kept)
    body = [*head, *lines, *([omitted_line] if omitted_line else [])]
    return Fitted(
        body,
        sum(map(len, body)),
        len(head) + kept,
        total - kept,
        raw,
        (*known, *held.known),
    )


def _fit_history(turn: TurnInput, cap: int, max_messages: int) -> Fitted:
    messages = sorted(turn.history or (), key=lambda m: m.seq)
    newest = messages[-max_messages:] if max_messages else []
    # Newest first, so the oldest are the ones that do not fit.
    lines, chars = _take_lines(
        newest[::-1],
        history_envelopes,
        lambda m: len(m.sender) + len(m.text),
        cap,
    )
    lines.reverse()
    raw = sum(len(m.text) for m in messages)
    return Fitted(lines, chars, len(lines), len(messages) - len(lines), raw)


def _fit_backlog(turn: TurnInput, cap: int, max_messages: int) -> Fitted:
    messages = sorted(turn.backlog, key=lambda m: m.seq)
    newest = messages[-max_messages:] if max_messages else []
    total = turn.backlog_omitted + len(messages)
    raw = sum(len(m.text) for m in messages)
    lines = _newest_messages(newest, cap)
    if len(lines) == total:
        return Fitted(lines, sum(map(len, lines)), total, 0, raw)
    # Room for the count is kept first; the count can only get smaller.
    reserve = len(messages_omitted_line(total))
    if cap < reserve:
        return Fitted([], 0, 0, total, raw)
    lines = _newest_messages(newest, cap - reserve)
    body = [messages_omitted_line(total - len(lines)), *lines]
    return Fitted(body, sum(map(len, body)), len(lines), total - len(lines), raw)


def _newest_messages(messages: Sequence[ChannelMessage], cap: int) -> list[str]:
    """Message envelopes of the newest *messages* that fit in *cap*, oldest first."""
    lines, _ = _take_lines(
        messages[::-1],
        message_envelopes,
        lambda m: len(m.sender) + len(m.text) + len('"at":"2000-01-01T00:00:00Z",'),
        cap,
    )
    lines.reverse()
    return lines


def _fit_memory(scope: RunScope, turn: TurnInput, cap: int, limit: int) -> Fitted:
    memory = memory_view(turn.memory)
    held = Held() if turn.shown is None else held_memory(memory, scope.channel, turn.shown)
    eligible, raw = memory.totals(scope.channel)
    fresh = eligible - len(held.known)
    # Nothing fresh (a session's usual turn): no message to rank against.
    if not fresh:
        return Fitted([], 0, 0, 0, raw - held.raw_chars, held.known)
    ranking = memory.ranking(turn.text, scope.channel, held.ordinals, turn.recent)
    # Under pressure the lowest-ranked notes go first, so what is kept is
    # the top of the ranking. A note too long for the limit, or for what is
    # left, is passed over while shorter ones further down may still fit,
    # up to _PASS_OVER of them: past that the block is as full as it gets.
    lines: list[str] = []
    shown: list[Ranked] = []
    passed: list[PassedOver] = []
    chars = 0
    # No note's line is shorter than this: with less room the block is full.
    shortest = memory.shortest(scope.channel) + _MEMORY_LINE
    for ranked in ranking:
        if cap - chars < shortest or len(passed) == _PASS_OVER:
            break
        item = ranked.item
        line = memory_line(item.id, item.text)
        if len(line) > limit or chars + len(line) > cap:
            reason: PassOverReason = (
                "over the memory limit" if len(line) > limit else "over the room left"
            )
            passed.append(PassedOver(encodable(item.id), len(line), reason))
            continue
        lines.append(line)
        shown.append(ranked)
        chars += len(line)
    reasons = [
        NoteReason(
            encodable(ranked.item.id),
            round(ranked.score, 3),
            tuple(terms),
            tuple(borrowed),
            None if beside is None else encodable(beside),
        )
        for ranked, (terms, borrowed, beside) in zip(shown, ranking.reasons(shown), strict=True)
    ]
    return Fitted(
        lines,
        chars,
        len(lines),
        fresh - len(lines),
        raw - held.raw_chars,
        held.known,
        notes=tuple(reasons),
        passed_over=tuple(passed) or None,
    )


def _take_lines(
    items: Iterable[_T],
    envelopes: Callable[[Sequence[_T]], list[Envelope]],
    size_hint: Callable[[_T], int],
    cap: int,
    *,
    skip_over: int | None = None,
) -> tuple[list[str], int]:
    """The lines of the leading *items* that fit in *cap* characters.

    Stops at the first line that does not fit; with *skip_over*, a line
    longer than that is passed over instead. Items are taken and rendered
    in batches of about what the room left could hold, so a long tail that
    cannot fit is never taken from *items* (a lazy ranking stops there).
    """
    pending = iter(items)
    lines: list[str] = []
    chars = 0
    while cap - chars >= _MIN_ENVELOPE:
        room = cap - chars
        batch: list[_T] = []
        estimate = 0
        for item in pending:
            batch.append(item)
            estimate += _MIN_ENVELOPE + size_hint(item)
            if estimate > room:
                break
        if not batch:
            break
        for line in render_lines(envelopes(batch)):
            if skip_over is not None and len(line) > skip_over:
                continue
            if chars + len(line) > cap:
                return lines, chars
            lines.append(line)
            chars += len(line)
    return lines, chars


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
