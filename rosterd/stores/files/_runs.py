"""Run directories: ``runs/<run-id>/`` with info, trace, transcript, system.

- ``run.json``: what the run is and how it ended (atomic replace);
- ``context.jsonl``: one trace record per compilation, fsynced before the
  engine sees a byte;
- ``transcript.jsonl``: every user turn, reply and failure, append-only;
- ``system.json``: a session's frozen system part, to resume it byte-exactly.

``sessions/<worker>/<channel>.json`` names the session each pair has open.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from ..._errors import NotFoundError, StaleError
from ..._ids import check_id
from ..._together import together
from ...compiler import ContextRecord
from ...org import Surface
from ...protocol import RunInfo, TranscriptEntry
from .._open_run import OpenRun
from .._records import Posts, SessionState, cut_off, new_run_id, unreached
from ._channels import FileChannels
from ._jsonl import JsonlLog, read_document, read_documents, remove_document, write_document
from ._leases import Leases
from ._reading import line_end, read_log, read_whole_lines, repair_tail

log = logging.getLogger("rosterd.stores")


class _SessionPointer(msgspec.Struct, frozen=True):
    session: str


class FileRun(OpenRun):
    """An open run: its trace and transcript logs, appended and fsynced."""

    def __init__(
        self,
        store: FileRuns,
        info: RunInfo,
        context: JsonlLog[ContextRecord],
        transcript: JsonlLog[TranscriptEntry],
        last_turn: int = 0,
    ) -> None:
        super().__init__(info, last_turn)
        self.store = store
        self._context = context
        self._transcript = transcript
        # Who ``hold`` took the run's lease for, until given up.
        self._holder: str | None = None
        # What ``record_later`` kept for the run's next write.
        self._later: list[TranscriptEntry] = []

    async def trace(self, record: ContextRecord) -> None:
        await self._write(record=record)

    async def record(self, entry: TranscriptEntry) -> None:
        await self._write(entries=(entry,))

    async def record_many(self, entries: Sequence[TranscriptEntry]) -> None:
        """Append *entries* with one write and one fsync."""
        await self._write(entries=entries)

    async def append(self, record: ContextRecord, entries: Sequence[TranscriptEntry]) -> None:
        """Both fsynced before the engine sees a byte."""
        await self._write(record=record, entries=entries)

    async def record_later(self, entry: TranscriptEntry) -> None:
        # A session turn's reply then goes in beside its channel posts: the
        # turn waits for the disk once for both, not once for each.
        self._later.append(entry)

    async def conclude(self, posts: Posts) -> None:
        await self._write(posts=posts)
        await self.let_go(self._holder or "")

    async def _write(
        self,
        *,
        record: ContextRecord | None = None,
        entries: Sequence[TranscriptEntry] = (),
        posts: Posts | None = None,
    ) -> None:
        """Append *record*, what ``record_later`` kept and *entries*, and
        *posts*, each file in parallel: one disk round trip for them all.
        What was kept is let go of only once it is durable.

        One write, kept whole or not at all in the run's own logs: when a
        part fails (or the write is cancelled), what landed of the others
        there is cut back, so a trace never stays without the user turn it
        sent, nor a user turn without its trace. Posts that landed in the
        channel's log, which others append to, stay.
        """
        later = len(self._later)
        entries = [*self._later, *entries]
        writes: list[Callable[[], Coroutine[Any, Any, object]]] = []
        marks: list[tuple[JsonlLog[Any], int]] = []
        if record is not None:
            writes.append(partial(self._context.append, record))
            marks.append((self._context, self._context.size))
        if entries:
            writes.append(partial(self._transcript.extend, entries))
            marks.append((self._transcript, self._transcript.size))
        if posts is not None:
            channels = self.store.channels
            assert channels is not None, "a reader's runs post nothing"
            writes.append(partial(channels.post_many, posts.channel, posts.messages, run=posts.run))
        if not writes:
            return
        try:
            await together(*writes)
        except BaseException:
            with anyio.CancelScope(shield=True):
                for written, size in marks:
                    await written.retract(size)
            raise
        del self._later[:later]
        if record is not None:
            self.last_turn = max(self.last_turn, record.turn)

    async def hold(self, holder: str, now: float, until: float) -> None:
        # Leases live in this daemon's memory: taken at once, no write to wait for.
        if self.store.leases.take(self.info.id, holder, now, until) is not None:
            raise StaleError(f"run {self.info.id!r} is leased to another holder")
        self._holder = holder

    async def renew(self, holder: str, until: float) -> bool:
        if self._holder is None:
            return True  # given up: nothing to lose
        return self.store.leases.renew(self.info.id, holder, until)

    async def let_go(self, holder: str) -> None:
        if self._holder is not None:
            self.store.leases.release(self.info.id, self._holder)
            self._holder = None

    async def end(self, info: RunInfo) -> None:
        """Write the run's final *info* and close its logs."""
        await self._write()
        # Held only once written: a run whose end failed goes on as it was.
        await self.store.write_info(info)
        self.info = info
        await self.aclose()

    async def aclose(self) -> None:
        await self._write()
        await self._context.aclose()
        await self._transcript.aclose()

    async def stale(self) -> bool:
        # The daemon holds the state directory's lock: no one else writes.
        return False


class FileRuns:
    """``runs/`` and ``sessions/`` under the state directory."""

    def __init__(self, state: Path) -> None:
        self.root = state / "runs"
        self._pointers = state / "sessions"
        self.leases = Leases()
        # Where a session turn's ``conclude`` posts: set by ``FileState``.
        self.channels: FileChannels | None = None
        # The daemon holding the directory is its only host: once it has
        # recovered at its start, no other host can cut a run off.
        self._recovered = False

    def __repr__(self) -> str:
        return f"FileRuns({str(self.root)!r})"

    def new_id(self, prefix: str, now: float) -> str:
        return new_run_id(prefix, now)

    def path(self, run: str) -> Path:
        return self.root / check_id("run", run)

    async def create(self, info: RunInfo) -> FileRun:
        await self.write_info(info)
        run, _ = await self.reopen(info)
        return run

    async def reopen(self, info: RunInfo) -> tuple[FileRun, list[TranscriptEntry]]:
        """Open a run's logs for appending (torn tails repaired), with its transcript."""
        directory = self.path(info.id)
        context, records = await JsonlLog.open(directory / "context.jsonl", ContextRecord)
        path = directory / "transcript.jsonl"
        transcript, entries = await JsonlLog.open(path, TranscriptEntry)
        last_turn = max((record.turn for record in records), default=0)
        traced = len(entries)
        while traced and entries[traced - 1].turn > last_turn:
            traced -= 1
        if traced < len(entries):
            # A kill between the two fsyncs of a turn's first write: its
            # user turn landed, its trace did not, so no engine saw it.
            log.warning(
                "%s: dropped %d entries of a turn never traced", path, len(entries) - traced
            )
            await transcript.retract(await line_end(path, traced))
            del entries[traced:]
        return FileRun(self, info, context, transcript, last_turn), entries

    async def recover(self, now: float) -> int:
        """After a kill: mark cut-off task/direct runs interrupted, and end
        ``failed`` each open session no pair's pointer leads to; their count.

        Sessions a pointer leads to (directly or through rollovers) stay
        ``open``: they resume from their transcript. One nothing leads to
        was cut off while it started, or while its rollover ended the old
        session: no open or send could ever reach or end it. The daemon
        holding the directory is its only host, so no one else is half way
        through such a start. Every run no longer open gets its torn last
        lines cut, since nothing will reopen its logs to do it.
        """
        if self._recovered:
            return 0
        self._recovered = True
        infos = await self.all()
        reached = await self._reached_sessions({info.id: info for info in infos})
        interrupted = abandoned = 0
        for info in infos:
            if info.status == "open" and info.surface == Surface.SESSION.value:
                if info.id in reached:
                    continue
                await self.write_info(unreached(info, now))
                abandoned += 1
            elif info.status == "open" and self.leases.free(info.id, now):
                await self.write_info(cut_off(info, now))
                interrupted += 1
            directory = self.path(info.id)
            await repair_tail(directory / "context.jsonl", ContextRecord)
            await repair_tail(directory / "transcript.jsonl", TranscriptEntry)
        if interrupted:
            log.warning("marked %d runs cut off by a stop as interrupted", interrupted)
        if abandoned:
            log.warning("ended %d sessions no pair leads to as failed", abandoned)
        return interrupted + abandoned

    async def _reached_sessions(self, infos: dict[str, RunInfo]) -> set[str]:
        """The sessions the pairs' pointers name, and those their rollovers lead to."""
        paths = await anyio.to_thread.run_sync(
            lambda: [str(path) for path in self._pointers.glob("*/*.json") if path.is_file()]
        )
        reached: set[str] = set()
        for pointer in await read_documents(paths, _SessionPointer):
            session = pointer.session
            while session not in reached and (info := infos.get(session)) is not None:
                reached.add(session)
                session = info.rolled_to or session
        return reached

    async def write_info(self, info: RunInfo) -> None:
        await write_document(self.path(info.id) / "run.json", info)

    async def info(self, run: str) -> RunInfo:
        info = await read_document(self.path(run) / "run.json", RunInfo)
        if info is None:
            raise NotFoundError("run", run)
        return info

    async def all(self) -> list[RunInfo]:
        try:
            names = await anyio.to_thread.run_sync(os.listdir, self.root)
        except FileNotFoundError:
            return []
        # Strings, not Paths: building 10,000 Paths costs more than reading them.
        root = str(self.root)
        infos = await read_documents([f"{root}/{name}/run.json" for name in names], RunInfo)
        return sorted(infos, key=lambda i: (i.created_at, i.id))

    async def context(self, run: str) -> list[ContextRecord]:
        return await read_log(self.path(run) / "context.jsonl", ContextRecord)

    async def export(self, run: str) -> bytes:
        return await read_whole_lines(self.path(run) / "context.jsonl")

    async def transcript(self, run: str) -> list[TranscriptEntry]:
        return await read_log(self.path(run) / "transcript.jsonl", TranscriptEntry)

    async def save_session(self, run: str, state: SessionState) -> None:
        await write_document(self.path(run) / "system.json", state)

    async def load_session(self, run: str) -> SessionState | None:
        return await read_document(self.path(run) / "system.json", SessionState)

    def _pointer(self, worker: str, channel: str) -> Path:
        return self._pointers / check_id("worker", worker) / f"{check_id('channel', channel)}.json"

    async def session_for(self, worker: str, channel: str) -> str | None:
        pointer = await read_document(self._pointer(worker, channel), _SessionPointer)
        return pointer.session if pointer is not None else None

    async def set_session(self, worker: str, channel: str, session: str) -> None:
        await write_document(self._pointer(worker, channel), _SessionPointer(session=session))

    async def clear_session(self, worker: str, channel: str) -> None:
        await remove_document(self._pointer(worker, channel))

    async def lease(self, run: str, holder: str, now: float, until: float) -> str | None:
        return self.leases.take(run, holder, now, until)

    async def release(self, run: str, holder: str) -> None:
        self.leases.release(run, holder)
