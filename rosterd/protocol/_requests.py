"""What a run sent: the engine's requests rebuilt from its trace and transcript."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .._errors import ConflictError, NotFoundError
from ..compiler import SYSTEM_ORDER, ContextRecord
from ._records import ChatMessage, ContextPage, TranscriptEntry, TurnRequest


def chat_messages(entries: Sequence[TranscriptEntry]) -> list[ChatMessage]:
    """The engine-facing transcript: failures are recorded, never sent."""
    return [
        ChatMessage(role=entry.role, content=entry.content, calls=entry.calls, call=entry.call)
        for entry in entries
        if entry.role != "error"
    ]


def request_at_turn(
    records: Sequence[ContextRecord],
    entries: Sequence[TranscriptEntry],
    turn: int,
    step: int = 1,
) -> tuple[str, list[ChatMessage]]:
    """The exact system text and messages the engine received at *turn*, *step*."""
    system = _system_record(records, turn)
    text = "".join(
        b.content for b in system.blocks if b.block in SYSTEM_ORDER and b.status != "absent"
    )
    sent = [
        e
        for e in entries
        if e.turn < turn
        or (e.turn == turn and (e.step < step or (e.step == step and e.role in _SENT_AT_STEP)))
    ]
    return text, chat_messages(sent)


def compiled_system(record: ContextRecord) -> bool:
    """Whether *record* is a run's compiled system part, which its requests
    start with: a session's ``system``, a task or direct run's ``run``."""
    return record.kind in ("system", "run") and record.status == "ok"


def _system_record(records: Sequence[ContextRecord], turn: int) -> ContextRecord:
    system = next((r for r in records if compiled_system(r)), None)
    if system is None:
        raise NotFoundError("compiled system part", f"turn {turn}")
    return system


def _steps(entries: Sequence[TranscriptEntry]) -> list[tuple[int, int]]:
    """Every (turn, step) whose request reached the engine, in order: a turn's
    first step, and each later one that got an answer or a failure; not the
    steps a session carried over from the one it continues."""
    sent = {(e.turn, 1) for e in entries if e.role == "user"}
    sent |= {(e.turn, e.step) for e in entries if e.role in ("assistant", "error")}
    return sorted(sent - carried_steps(entries))


def carried_steps(entries: Sequence[TranscriptEntry]) -> set[tuple[int, int]]:
    """The (turn, step) pairs whose engine call was made by the session the
    run continues: their replies were carried over, not asked for here."""
    return {(e.turn, e.step) for e in entries if e.carried and e.role == "assistant"}


_SENT_AT_STEP = frozenset({"user", "tool"})


# A runs.context page holds whole turns, as many as fit in this many characters
# of prompt text (at least one): following every page costs memory of one page,
# while a session's turns together are quadratic in its length.
CONTEXT_PAGE_CHARS = 1 << 20
CONTEXT_PAGE_TURNS = 100


def context_page(
    run: str,
    records: Sequence[ContextRecord],
    entries: Sequence[TranscriptEntry],
    *,
    every: bool,
    after: int = 0,
    limit: int = CONTEXT_PAGE_TURNS,
) -> ContextPage:
    """What the engine received: at the latest turn, or a page of every turn."""
    turns = sorted({e.turn for e in entries if e.role == "user"})
    if not turns:
        failed = next((r.error for r in records if r.error is not None), None)
        if failed is not None:
            raise ConflictError(
                f"run {run!r} sent nothing to the engine: its compilation failed "
                f"(block {failed.block!r} is {failed.size} characters, over its limit of "
                f"{failed.limit}); see 'roster server runs show {run}'"
            )
        raise ConflictError(f"run {run!r} has no turns yet: nothing was sent to the engine")
    tools_record = _system_record(records, turns[-1]).tools
    tools = tools_record.content if tools_record is not None else ""
    steps: dict[int, list[int]] = {}
    for turn, step in _steps(entries):
        steps.setdefault(turn, []).append(step)

    def request(turn: int, step: int) -> TurnRequest:
        system, messages = request_at_turn(records, entries, turn, step)
        return TurnRequest(turn, system, messages, step=step, tools=tools)

    if not every:
        last = turns[-1]
        return ContextPage([request(last, steps[last][-1])])
    pending = [turn for turn in turns if turn > after]
    page: list[TurnRequest] = []
    chars = 0
    for turn in pending[:limit]:
        requests = [request(turn, step) for step in steps[turn]]
        size = sum(len(r.system) + sum(len(m.content) for m in r.messages) for r in requests)
        if page and chars + size > CONTEXT_PAGE_CHARS:
            break
        page.extend(requests)
        chars += size
    done = len({r.turn for r in page})
    return ContextPage(page, next=page[-1].turn if done < len(pending) else None)


def context_json_items(requests: Sequence[TurnRequest]) -> list[bytes]:
    """Each request as ``runs context --json`` indents it inside its list:
    ``b"[\\n" + b",\\n".join(items) + b"\\n]\\n"`` is the whole output."""
    return [
        b"  " + msgspec.json.format(msgspec.json.encode(r), indent=2).replace(b"\n", b"\n  ")
        for r in requests
    ]
