"""Run directories: ``runs/<run-id>/`` with info, trace, transcript, system.

- ``run.json``: what the run is and how it ended (atomic replace);
- ``context.jsonl``: one trace record per compilation, fsynced before the
  engine sees a byte;
- ``transcript.jsonl``: every user turn, reply and failure, append-only;
- ``system.json``: a session's frozen system part, to resume it byte-exactly.

``sessions/<worker>/<channel>.json`` names the session each pair has open;
``settled-runs.jsonl`` the runs a start need not look at again.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from ..._errors import NotFoundError, StaleError, StorageError
from ..._ids import check_id, is_id
from ..._paging import newest_page
from ...compiler import ContextRecord
from ...org import Surface
from ...protocol import RunInfo, TranscriptEntry
from .._listing import RunList, UnreadableRun, run_list
from .._open_run import OpenRun
from .._records import Posts, SessionState, cut_off, new_run_id, unreached
from ._channels import FileChannels
from ._jsonl import (
    JsonlLog,
    Placed,
    durable,
    read_document,
    read_documents,
    remove_document,
    remove_leftover_tmp,
    write_document,
)
from ._leases import Leases
from ._reading import line_end, read_head, read_log, read_whole_lines, repair_tails
from ._settled import SETTLED_BATCH, SettledRuns

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
        placed: list[Placed] = []
        marks: list[tuple[JsonlLog[Any], int]] = []
        try:
            posted = None
            if posts is not None:
                # The channel's log may have to be opened: first, so that
                # nothing is under way yet if that fails.
                channels = self.store.channels
                assert channels is not None, "a reader's runs post nothing"
                _, posted = await channels.place_many(posts.channel, posts.messages, run=posts.run)
            if record is not None:
                marks.append((self._context, self._context.size))
                placed.append(self._context.place((record,)))
            if entries:
                marks.append((self._transcript, self._transcript.size))
                placed.append(self._transcript.place(entries))
            if posted is not None:
                placed.append(posted)
            await durable(placed)
        except BaseException:
            with anyio.CancelScope(shield=True):
                for each in placed:
                    await each.settled()
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
        if not (self._context.stopped or self._transcript.stopped):
            # A log left with a failed write's bytes waits for a start to cut them.
            await self.store.settled.ended(info.id)

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
        self.settled = SettledRuns(state / "settled-runs.jsonl")
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
        lines cut and its leftover temporaries removed, since nothing will
        reopen its logs to do it, and is listed settled.

        Only the runs not listed settled are read: those still open, and
        those that ended since they were listed. A state from before the
        list has every run read once, and listed.
        """
        if self._recovered:
            return 0
        self._recovered = True
        settled = await self.settled.load()
        if settled is None:
            # From now on a start reads only what the list does not hold.
            await self.settled.add(())
        names = await self._names()
        unsettled = names if settled is None else [n for n in names if n not in settled]
        reached = await self._reached_sessions()
        ended_now: Counter[str] = Counter()
        # A batch at a time, each listed once recovered: a start cut short
        # (by systemd's start timeout, say) leaves the next one less to read.
        for first in range(0, len(unsettled), SETTLED_BATCH):
            batch = unsettled[first : first + SETTLED_BATCH]
            ended_now += await self._recover_batch(batch, reached, now)
        if ended_now["interrupted"]:
            log.warning("marked %d runs cut off by a stop as interrupted", ended_now["interrupted"])
        if ended_now["failed"]:
            log.warning("ended %d sessions no pair leads to as failed", ended_now["failed"])
        log.info(
            "recovery read %d of %d runs (%s)",
            len(unsettled),
            len(names),
            "no settled list yet" if settled is None else "the rest settled",
        )
        return ended_now.total()

    async def aclose(self) -> None:
        """At a clean stop: list the runs ended since the last batch, so
        that the next start reads none of them."""
        await self.settled.flush()

    async def _recover_batch(
        self, names: list[str], reached: set[str] | None, now: float
    ) -> Counter[str]:
        """Recover the runs *names* name, and list settled those no longer
        open; how many open ones ended, by how they ended. One whose
        ``run.json`` cannot be read is left as it is, and unlisted, for a
        start after it is mended: it must not keep the daemon from serving."""
        unreadable: list[StorageError] = []
        infos = await self._infos(names, unreadable)
        unsettled = set()
        for failure in map(_unreadable_run, unreadable):
            log.error(
                "run %s cannot be read; a start leaves it as it is: %s", failure.run, failure.reason
            )
            unsettled.add(failure.run)
        await anyio.to_thread.run_sync(self._remove_leftover_tmp, names)
        ended_now: Counter[str] = Counter()
        logs: list[tuple[Path, type[Any]]] = []
        for info in infos:
            after = await self._end_if_cut_off(info, reached, now)
            if after.status == "open":
                unsettled.add(info.id)
                continue
            if info.status == "open":
                ended_now[after.status] += 1
            directory = self.path(info.id)
            logs.append((directory / "context.jsonl", ContextRecord))
            logs.append((directory / "transcript.jsonl", TranscriptEntry))
        await repair_tails(logs)
        await self.settled.add([name for name in names if name not in unsettled])
        return ended_now

    async def _end_if_cut_off(self, info: RunInfo, reached: set[str] | None, now: float) -> RunInfo:
        """*info*, ended if its run is open and nothing can go on with it
        (*reached*: the sessions a pair leads to, ``None`` if unknown)."""
        if info.status == "open" and info.surface == Surface.SESSION.value:
            if reached is None or info.id in reached:
                return info
            info = unreached(info, now)
            await self.write_info(info)
        elif info.status == "open" and self.leases.free(info.id, now):
            info = cut_off(info, now)
            await self.write_info(info)
        return info

    async def _names(self) -> list[str]:
        """What is in ``runs/``: each run's directory, and whatever else is there."""
        try:
            return await anyio.to_thread.run_sync(os.listdir, self.root)
        except FileNotFoundError:
            return []

    def _remove_leftover_tmp(self, names: list[str]) -> None:
        """A kill leaves a temporary only in a run it wrote to: one not settled."""
        for name in names:
            if is_id(name):
                remove_leftover_tmp(self.path(name))

    async def _reached_sessions(self) -> set[str] | None:
        """The sessions the pairs' pointers name, and those their rollovers
        lead to: each run on the way read, and no other. ``None`` when one
        on the way cannot be read: where it leads is unknown."""
        paths = await anyio.to_thread.run_sync(
            lambda: [str(path) for path in self._pointers.glob("*/*.json") if path.is_file()]
        )
        reached: set[str] = set()
        for pointer in await read_documents(paths, _SessionPointer):
            session = pointer.session
            while session not in reached:
                try:
                    info = await self._info_of(session)
                except StorageError as exc:
                    failure = _unreadable_run(exc)
                    log.error(
                        "a pair leads to run %s, which cannot be read, so no open session "
                        "is ended as one no pair leads to at this start: %s",
                        failure.run,
                        failure.reason,
                    )
                    return None
                if info is None:
                    break
                reached.add(session)
                session = info.rolled_to or session
        return reached

    async def _info_of(self, run: str) -> RunInfo | None:
        if not is_id(run):
            return None  # a pointer written by hand leads nowhere
        return await read_document(self.path(run) / "run.json", RunInfo)

    async def write_info(self, info: RunInfo) -> None:
        await write_document(self.path(info.id) / "run.json", info)

    async def info(self, run: str) -> RunInfo:
        info = await read_document(self.path(run) / "run.json", RunInfo)
        if info is None:
            raise NotFoundError("run", run)
        return info

    async def all(self) -> RunList:
        failures: list[StorageError] = []
        infos = await self._infos(await self._names(), failures)
        return run_list(infos, [_unreadable_run(failure) for failure in failures])

    async def newest(self, limit: int | None, before: str | None = None) -> list[RunInfo]:
        # Every run.json is read: the directory holds no order to page by.
        return newest_page((await self.all()).runs, "run", limit, before)

    async def _infos(self, names: list[str], unreadable: list[StorageError]) -> list[RunInfo]:
        """The info of each run *names* name that has one, in their order;
        each that cannot be read goes to *unreadable* instead."""
        root = str(self.root)
        # Strings, not Paths: building 10,000 Paths costs more than reading them.
        paths = [f"{root}/{name}/run.json" for name in names]
        return await read_documents(paths, RunInfo, unreadable)

    async def context(self, run: str) -> list[ContextRecord]:
        return await read_log(self.path(run) / "context.jsonl", ContextRecord)

    async def context_until(
        self, run: str, enough: Callable[[ContextRecord], bool]
    ) -> list[ContextRecord]:
        return await read_head(self.path(run) / "context.jsonl", ContextRecord, enough)

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


def _unreadable_run(failure: StorageError) -> UnreadableRun:
    """The run whose ``run.json`` *failure* is about, and what went wrong."""
    return UnreadableRun(Path(failure.path).parent.name, failure.message)
