"""Run directories: ``runs/<run-id>/`` with info, trace, transcript, system.

- ``run.json``: what the run is and how it ended (atomic replace);
- ``context.jsonl``: one trace record per compilation, fsynced before the
  engine sees a byte;
- ``transcript.jsonl``: every user turn, reply and failure, append-only;
- ``system.json``: a session's frozen system part, to resume it byte-exactly.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import aiofiles.os
import msgspec

from .._errors import ConflictError, NotFoundError
from .._ids import check_id
from ..compiler import SYSTEM_ORDER, ContextRecord, SystemPrompt
from ..org import EngineConfig, Surface
from ..protocol import ChatMessage, ContextPage, RunInfo, RunStatus, TranscriptEntry, TurnRequest
from ..stores import JsonlLog, read_document, read_log, repair_tail, write_document

__all__ = (
    "CONTEXT_PAGE_CHARS",
    "CONTEXT_PAGE_TURNS",
    "ActiveRun",
    "ContextPage",
    "RunInfo",
    "RunStatus",
    "RunStore",
    "SessionState",
    "TranscriptEntry",
    "TurnRequest",
    "chat_messages",
    "context_page",
    "request_at_turn",
)

log = logging.getLogger("rosterd.sessions")


class SessionState(msgspec.Struct, frozen=True):
    """``system.json``: what a session froze when it started."""

    system: SystemPrompt
    engine: EngineConfig


class SessionPointer(msgspec.Struct, frozen=True):
    session: str


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


def _system_record(records: Sequence[ContextRecord], turn: int) -> ContextRecord:
    system = next((r for r in records if r.kind in ("system", "run") and r.status == "ok"), None)
    if system is None:
        raise NotFoundError("compiled system part", f"turn {turn}")
    return system


def _steps(entries: Sequence[TranscriptEntry]) -> list[tuple[int, int]]:
    """Every (turn, step) whose request reached the engine, in order: a turn's
    first step, and each later one that got an answer or a failure."""
    sent = {(e.turn, 1) for e in entries if e.role == "user"}
    sent |= {(e.turn, e.step) for e in entries if e.role in ("assistant", "error")}
    return sorted(sent)


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


class ActiveRun:
    """An open run: its trace and transcript logs, appended and fsynced."""

    def __init__(
        self,
        store: RunStore,
        info: RunInfo,
        context: JsonlLog[ContextRecord],
        transcript: JsonlLog[TranscriptEntry],
        last_turn: int = 0,
    ) -> None:
        self.store = store
        self.info = info
        # The highest turn traced so far, failed compilations included.
        self.last_turn = last_turn
        self._context = context
        self._transcript = transcript

    def __repr__(self) -> str:
        return f"ActiveRun({self.info.id!r}, {self.info.status})"

    async def trace(self, record: ContextRecord) -> None:
        await self._context.append(record)

    async def record(self, entry: TranscriptEntry) -> None:
        await self._transcript.append(entry)

    async def record_many(self, entries: Sequence[TranscriptEntry]) -> None:
        """Append *entries* with one write and one fsync."""
        await self._transcript.extend(entries)

    async def finish(self, status: RunStatus, at: float, error: str | None = None) -> None:
        await self.end(msgspec.structs.replace(self.info, status=status, ended_at=at, error=error))

    async def end(self, info: RunInfo) -> None:
        """Write the run's final *info* and close its logs."""
        self.info = info
        await self.store.write_info(self.info)
        await self.aclose()

    async def aclose(self) -> None:
        await self._context.aclose()
        await self._transcript.aclose()


class RunStore:
    """``runs/`` and ``sessions/`` under the state directory."""

    def __init__(self, state: Path) -> None:
        self.root = state / "runs"
        self._pointers = state / "sessions"

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

    def new_id(self, prefix: str, now: float) -> str:
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%d-%H%M%S")
        return f"{prefix}-{stamp}-{secrets.token_hex(3)}"

    def path(self, run: str) -> Path:
        return self.root / check_id("run", run)

    async def create(self, info: RunInfo) -> ActiveRun:
        await self.write_info(info)
        run, _ = await self.reopen(info)
        return run

    async def reopen(self, info: RunInfo) -> tuple[ActiveRun, list[TranscriptEntry]]:
        """Open a run's logs for appending (torn tails repaired), with its transcript."""
        directory = self.path(info.id)
        context, records = await JsonlLog.open(directory / "context.jsonl", ContextRecord)
        transcript, entries = await JsonlLog.open(directory / "transcript.jsonl", TranscriptEntry)
        last_turn = max((record.turn for record in records), default=0)
        return ActiveRun(self, info, context, transcript, last_turn), entries

    async def recover(self, now: float) -> int:
        """After a kill: mark cut-off task/direct runs interrupted; their count.

        Sessions stay ``open``: they resume from their transcript. Every run
        no longer open gets its torn last lines cut, since nothing will
        reopen its logs to do it.
        """
        interrupted = 0
        for info in await self.all():
            if info.status == "open" and info.surface == Surface.SESSION.value:
                continue
            if info.status == "open":
                await self.write_info(
                    msgspec.structs.replace(
                        info,
                        status="interrupted",
                        ended_at=now,
                        error="the daemon stopped before this run finished",
                    )
                )
                interrupted += 1
            directory = self.path(info.id)
            await repair_tail(directory / "context.jsonl", ContextRecord)
            await repair_tail(directory / "transcript.jsonl", TranscriptEntry)
        if interrupted:
            log.warning("marked %d runs cut off by a stop as interrupted", interrupted)
        return interrupted

    async def write_info(self, info: RunInfo) -> None:
        await write_document(self.path(info.id) / "run.json", info)

    async def info(self, run: str) -> RunInfo:
        info = await read_document(self.path(run) / "run.json", RunInfo)
        if info is None:
            raise NotFoundError("run", run)
        return info

    async def all(self) -> list[RunInfo]:
        try:
            names = await aiofiles.os.listdir(self.root)
        except FileNotFoundError:
            return []
        infos = []
        for name in names:
            info = await read_document(self.root / name / "run.json", RunInfo)
            if info is not None:
                infos.append(info)
        return sorted(infos, key=lambda i: (i.created_at, i.id))

    async def context(self, run: str) -> list[ContextRecord]:
        return await read_log(self.path(run) / "context.jsonl", ContextRecord)

    async def transcript(self, run: str) -> list[TranscriptEntry]:
        return await read_log(self.path(run) / "transcript.jsonl", TranscriptEntry)

    async def save_session(self, run: str, state: SessionState) -> None:
        await write_document(self.path(run) / "system.json", state)

    async def load_session(self, run: str) -> SessionState | None:
        return await read_document(self.path(run) / "system.json", SessionState)

    def _pointer(self, worker: str, channel: str) -> Path:
        return self._pointers / check_id("worker", worker) / f"{check_id('channel', channel)}.json"

    async def session_for(self, worker: str, channel: str) -> str | None:
        pointer = await read_document(self._pointer(worker, channel), SessionPointer)
        return pointer.session if pointer is not None else None

    async def set_session(self, worker: str, channel: str, session: str) -> None:
        await write_document(self._pointer(worker, channel), SessionPointer(session=session))

    async def clear_session(self, worker: str, channel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await aiofiles.os.remove(self._pointer(worker, channel))
