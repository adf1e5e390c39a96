"""The advisory blocks of the input part, registered once each.

An ``AdvisorySpec`` is everything about one block: its name (which is also
its budget key in ``[context]``), where its items come from, what it gives
up first under pressure, the order it gets room in, and how it fits its
items into the room it gets. The input part shows them in ``ADVISORY``
order, then the request; ``compile_turn`` gives them room in
``ROOM_ORDER``, so the last to get room shrinks first.
A block kind is added here, with its name in ``AdvisoryBlock`` and its
lines' renderer (those of the first four are in ``_blocks``, which the
shown ledger shares); its budget key goes in ``ContextBudget`` and its
items in ``TurnInput``, which the session fills.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from operator import attrgetter
from typing import Literal, NamedTuple, TypeVar

import msgspec

from ..org import ContextBudget, RunScope
from ._blocks import (
    Fitted,
    RequestBlock,
    SystemBlock,
    absent_block,
    continuation_line,
    gate_line,
    gates_omitted_chars,
    gates_omitted_line,
    history_envelopes,
    input_block,
    memory_line,
    message_envelopes,
    messages_omitted_line,
)
from ._envelopes import Envelope, encodable, render_lines
from ._gates import gate_view
from ._inputs import TurnInput
from ._items import ChannelMessage
from ._memory import Ranked, memory_view
from ._shown import Held, held_gates, held_memory, unshown_gates
from ._trace import BlockTrace, NoteReason, PassedOver, PassOverReason

_T = TypeVar("_T")

AdvisoryBlock = Literal["memory", "briefing", "history", "backlog"]
# Every block a record may hold: the system part's, the advisory ones, the
# request, and a tool loop's definitions and results.
BlockName = Literal[SystemBlock, AdvisoryBlock, RequestBlock, "tools", "tool"]
_filed = attrgetter("filed_at", "id")
# No envelope renders shorter than this, so a smaller remainder fits nothing.
_MIN_ENVELOPE = 24
# Notes the memory block passes over, too long for what is left, before
# it stops looking further down the ranking.
_PASS_OVER = 32
# What a memory line holds besides the note's id and text.
_MEMORY_LINE = len(memory_line("", ""))

# How a block fits its items into *cap* characters.
Fit = Callable[[RunScope, TurnInput, int, ContextBudget], Fitted]


class KeptWhole(Exception):
    """A part of a block that is never cut does not fit: the compilation
    fails naming the block, as a mandatory one's would. ``compile_turn``
    turns it into that ``CompileError``; it never leaves the compiler."""

    def __init__(self, fitted: Fitted, limit: int, reason: str) -> None:
        self.fitted = fitted
        self.limit = limit
        self.reason = reason


def _present(turn: TurnInput) -> str | None:
    return None


def _history_absent(turn: TurnInput) -> str | None:
    return "not the first turn of a fresh session" if turn.history is None else None


class AdvisorySpec(NamedTuple):
    """One advisory block: see the module's docstring."""

    name: AdvisoryBlock
    source: str
    shrinks: str
    # Lower gets room earlier, so it is the last to shrink.
    room: int
    fit: Fit
    # Why the block is absent from this turn, or None if it is not.
    absent: Callable[[TurnInput], str | None] = _present

    def limit(self, budget: ContextBudget) -> int:
        """The block's own budget, the ``[context]`` key of its name."""
        limit: int = getattr(budget, self.name)
        return limit


def advisory_trace(
    spec: AdvisorySpec, turn: TurnInput, fitted: Fitted, limit: int, sha256: str | None = None
) -> BlockTrace:
    """*fitted* as *spec*'s traced block; *sha256* is its content's, if known."""
    reason = spec.absent(turn)
    if reason is not None:
        return absent_block(spec.name, reason)
    return input_block(spec.name, spec.source, fitted, limit, sha256)


def _fit_briefing(scope: RunScope, turn: TurnInput, cap: int, budget: ContextBudget) -> Fitted:
    head: list[str] = []
    raw = 0
    if turn.continuation is not None:
        c = turn.continuation
        head.append(continuation_line(c))
        raw += len(c.summary) + len(c.outcome) + len(c.note)
    head_chars = sum(map(len, head))
    if head_chars > cap:
        fitted = Fitted(head, head_chars, 1, 0, raw)
        raise KeptWhole(fitted, cap, "the continuation outcome is kept whole")

    gates = gate_view(turn.gates, scope.worker)
    shown = turn.shown.gates if turn.shown is not None else {}
    # The continuation's own gate is its first line, never a second one.
    own = turn.continuation.gate if turn.continuation is not None else None
    resolved = sorted(
        (
            g
            for g in gates.resolved
            if (g.channel is None or g.channel == scope.channel) and g.id != own
        ),
        key=_filed,
    )
    resolved_lines = [gate_line(g.id, g.summary, g.outcome, g.note) for g in resolved]
    resolved, resolved_lines, known = unshown_gates(resolved, resolved_lines, shown)
    held = (
        Held(known=known, count=len(known))
        if turn.shown is None
        else held_gates(gates, scope.channel, turn.shown, known)
    )
    open_count, open_raw = gates.totals(scope.channel)
    # Of the held gates, those after the resolved ones are open.
    total = len(resolved) + open_count - (held.count - len(known))
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
    return _holding(Fitted(body, sum(map(len, body)), len(head) + kept, total - kept, raw), held)


def _fit_history(scope: RunScope, turn: TurnInput, cap: int, budget: ContextBudget) -> Fitted:
    messages = sorted(turn.history or (), key=lambda m: m.seq)
    count = budget.history_messages
    newest = messages[-count:] if count else []
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


def _fit_backlog(scope: RunScope, turn: TurnInput, cap: int, budget: ContextBudget) -> Fitted:
    messages = sorted(turn.backlog, key=lambda m: m.seq)
    count = budget.backlog_messages
    newest = messages[-count:] if count else []
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


def _fit_memory(scope: RunScope, turn: TurnInput, cap: int, budget: ContextBudget) -> Fitted:
    limit = budget.memory
    memory = memory_view(turn.memory)
    held = Held() if turn.shown is None else held_memory(memory, scope.channel, turn.shown)
    eligible, raw = memory.totals(scope.channel)
    fresh = eligible - held.count
    # Nothing fresh (a session's usual turn): no message to rank against.
    if not fresh:
        return _holding(Fitted([], 0, 0, 0, raw - held.raw_chars), held)
    ranking = memory.ranking(
        turn.text, scope.channel, held.ordinals, turn.recent, turn.previous_turn_at
    )
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
            terms,
            borrowed,
            None if beside is None else encodable(beside),
        )
        for ranked, (terms, borrowed, beside) in zip(shown, ranking.reasons(shown), strict=True)
    ]
    fitted = Fitted(
        lines,
        chars,
        len(lines),
        fresh - len(lines),
        raw - held.raw_chars,
        notes=tuple(reasons),
        passed_over=tuple(passed) or None,
    )
    return _holding(fitted, held)


def _holding(fitted: Fitted, held: Held) -> Fitted:
    """*fitted* with the items of its block the conversation holds, as
    *held* traces them: all of them, or what changed (see ``BlockTrace``)."""
    return msgspec.structs.replace(
        fitted,
        already_shown=held.known,
        held=held.count,
        newly_held=held.newly,
        no_longer_held=held.gone,
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


# The input part shows these in this order; the first one's digest is a
# step of hashing the input, so memory leads.
ADVISORY: tuple[AdvisorySpec, ...] = (
    AdvisorySpec("memory", "store: memory", "lowest-ranked items dropped to fit", 3, _fit_memory),
    AdvisorySpec(
        "briefing",
        "store: gates",
        "gates dropped to fit; the continuation is kept",
        0,
        _fit_briefing,
    ),
    AdvisorySpec(
        "history",
        "store: channel log",
        "oldest messages dropped to fit",
        1,
        _fit_history,
        _history_absent,
    ),
    AdvisorySpec(
        "backlog",
        "store: channel log since the last turn",
        "oldest messages dropped to fit; an envelope counts them",
        2,
        _fit_backlog,
    ),
)
ADVISORY_ORDER: tuple[AdvisoryBlock, ...] = tuple(spec.name for spec in ADVISORY)
ROOM_ORDER: tuple[AdvisorySpec, ...] = tuple(sorted(ADVISORY, key=attrgetter("room")))
# What each advisory block gives up first when the budget is tight.
SHRINK_RULE: Mapping[str, str] = {spec.name: spec.shrinks for spec in ADVISORY}
