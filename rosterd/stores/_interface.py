"""What every state backend provides: one Protocol per kind of state, but
memory, whose reads every backend answers alike from one index per worker:
``MemoryStore`` is an abstract class that implements them.

Sessions, the task pool, the daemon and the CLI use only these. A backend
(``files/`` today) implements each of them; ids, channel seqs and note
numbers come from the backend, never from a count the caller keeps.

Every write returns once it is durable: a trace record or a user turn is
on disk (or committed) before the engine sees a byte of its request.

A warm session's turn reads with ``cached=True``: a backend may answer from
what this host already holds, and the run's next write, which takes the
lease ``ActiveRun.hold`` asked for, then checks that it was still current
(``StaleError`` when not: nothing written, the caller reads again). On a
database a warm turn is so two round trips: ``append`` (the lease, the
check, the trace and the user turn) and ``conclude`` (the reply that
``record_later`` kept, the channel posts, the lease given up).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from ..compiler import (
    ChannelMessage,
    ContextRecord,
    GateView,
    MemoryIndex,
    MemoryItem,
    MemoryView,
    PrefixState,
    Retirement,
)
from ..protocol import GateState, RunInfo, RunStatus, TaskState, TaskStatus, TranscriptEntry
from ._indexing import new_note
from ._listing import RunList
from ._records import Posts, SessionState


class ChannelStore(Protocol):
    """Each channel's messages in seq order: posts and every session turn."""

    async def post_many(
        self, channel: str, posts: Sequence[tuple[str, str, float]], *, run: str | None = None
    ) -> list[ChannelMessage]:
        """Append (sender, text, at) messages in order, numbered by the store;
        *run* names the session whose turn they are."""
        ...

    async def recent(self, channel: str, limit: int) -> tuple[ChannelMessage, ...]:
        """The newest *limit* messages, oldest first."""
        ...

    async def last_seq(self, channel: str) -> int:
        """The seq of the channel's newest message; 0 when it has none."""
        ...

    async def since(
        self, channel: str, after: int, *, exclude_run: str, limit: int, cached: bool = False
    ) -> tuple[tuple[ChannelMessage, ...], int, int]:
        """What others posted after seq *after*: the newest *limit* messages not
        posted by *exclude_run*, oldest first; how many earlier ones are left
        out; and the channel's last seq. Costs what is new, not the channel's
        length."""
        ...


class MemoryStore(ABC):
    """Each worker's notes, eligible from the next compilation on, until retired.

    Every backend answers a worker's reads from one ``MemoryIndex``, as
    implemented here: it says how it numbers and keeps a new note
    (``_append``), how it keeps a retirement (``retire``), and how it brings
    a worker's index up to date (``_index``)."""

    async def add(
        self,
        worker: str,
        text: str,
        channel: str | None,
        at: float,
        *,
        run: str | None = None,
        turn: int | None = None,
    ) -> MemoryItem:
        """A new note, durable on return: an operator's, or (with *run* and
        *turn*) one the worker wrote in that turn."""
        return await self._append(worker, lambda n: new_note(n, text, channel, at, run, turn))

    @abstractmethod
    async def retire(
        self, worker: str, retirement: Retirement, channels: Collection[str | None] | None = None
    ) -> MemoryItem:
        """Retire note ``retirement.note`` of *worker*, durably, and return
        it; with *channels*, only a note whose channel (``None``:
        worker-wide) is one of them. ``NotFoundError`` when there is no such
        live note."""

    async def items(self, worker: str) -> tuple[MemoryItem, ...]:
        """Every note of *worker*, oldest first, retired ones included."""
        return (await self._index(worker)).items()

    async def retirements(self, worker: str) -> Mapping[str, Retirement]:
        """How each retired note of *worker* was retired, by note id."""
        return dict((await self._index(worker)).retirements())

    async def view(self, worker: str, *, cached: bool = False) -> MemoryView:
        """A snapshot that later additions do not change, indexed so that a
        turn ranks only the notes sharing its message's words."""
        return (await self._index(worker, cached=cached)).snapshot()

    @abstractmethod
    async def _append(self, worker: str, note: Callable[[int], MemoryItem]) -> MemoryItem:
        """Keep ``note(n)``, durably, where *n* is the worker's next number."""

    @abstractmethod
    async def _index(self, worker: str, *, cached: bool = False) -> MemoryIndex:
        """*worker*'s index, holding every note kept so far (*cached*: as
        this host holds it, if it does)."""


class GateStore(Protocol):
    """Questions workers wait on, filed by workers and resolved by people."""

    async def file(
        self, worker: str, summary: str, at: float, channel: str | None, run: str | None
    ) -> GateState: ...

    async def resolve(self, gate_id: str, outcome: str, note: str, at: float) -> GateState:
        """Raises ``ConflictError`` if the gate is already resolved."""
        ...

    async def get(self, gate_id: str) -> GateState:
        """Raises ``NotFoundError`` for an unknown id."""
        ...

    async def all(self, worker: str | None = None) -> list[GateState]:
        """Every gate (of *worker*), in filing order."""
        ...

    async def briefing_for(
        self, worker: str, resolved_since: float | None, *, cached: bool = False
    ) -> GateView:
        """Open gates of *worker*, and those resolved after *resolved_since*;
        independent of how many gates were ever filed."""
        ...

    async def waiting_on(self, run: str) -> bool:
        """Whether an open gate was filed against *run*."""
        ...

    async def open_against_runs(self) -> list[GateState]:
        """Every open gate filed against a run, in filing order: as many as
        wait, however many were ever filed."""
        ...

    async def against(self, runs: Collection[str]) -> list[GateState]:
        """Every gate filed against one of *runs*, in filing order."""
        ...


class TaskStore(Protocol):
    """Queued tasks and their lifecycle."""

    async def submit(self, worker: str, channel: str, text: str, at: float) -> TaskState: ...

    async def update(self, task: TaskState) -> TaskState:
        """Store *task*'s new state as a whole."""
        ...

    async def get(self, task_id: str) -> TaskState:
        """Raises ``NotFoundError`` for an unknown id."""
        ...

    async def by_run(self, run: str) -> TaskState | None: ...

    async def all(self) -> list[TaskState]:
        """Every task, in submission order."""
        ...

    async def counts(self) -> dict[TaskStatus, int]:
        """How many tasks there are of each status, a status no task has
        left out; without reading the tasks (a gauge asks every few
        seconds, however many tasks the history holds)."""
        ...

    async def gated(self, runs: Collection[str]) -> list[TaskState]:
        """The tasks a gate may still move, once each, in submission order:
        every paused one, and each done one whose last run is one of *runs*."""
        ...

    async def claim(self, holder: str, now: float, until: float) -> TaskState | None:
        """The oldest task no live host holds, leased to *holder* until *until*:
        queued, or running under a lease that ran out before *now* (its host
        died). Each task goes to one claimant; ``None`` when none is left."""
        ...

    async def renew(self, task_id: str, holder: str, until: float) -> bool:
        """Extend *holder*'s lease on a task; ``False`` if it lost it."""
        ...

    async def release(self, task_id: str, holder: str) -> None:
        """Give up *holder*'s lease (the run finished, or the host stops)."""
        ...


class ActiveRun(Protocol):
    """An open run: its trace and transcript, each append durable on return."""

    info: RunInfo
    # The highest turn whose trace is durable, failed compilations included.
    last_turn: int

    async def trace(self, record: ContextRecord) -> None: ...

    async def record(self, entry: TranscriptEntry) -> None: ...

    async def record_many(self, entries: Sequence[TranscriptEntry]) -> None:
        """Append *entries* at once (one fsync or one commit)."""
        ...

    async def append(self, record: ContextRecord, entries: Sequence[TranscriptEntry]) -> None:
        """A compilation's trace *record* and the transcript *entries* it
        sends, both durable on return: before the engine sees a byte."""
        ...

    async def record_later(self, entry: TranscriptEntry) -> None:
        """Append *entry* by the time the run's next write returns (on a
        database, in that write's transaction): a turn's last reply, which
        its ``conclude`` or the run's ``end`` makes durable."""
        ...

    async def conclude(self, posts: Posts) -> None:
        """A session turn's end: what ``record_later`` kept and the turn's
        channel *posts*, durable on return, and the lease ``hold`` asked for
        given up with them."""
        ...

    async def hold(self, holder: str, now: float, until: float) -> None:
        """Hold the run's lease for *holder* until *until* from the run's next
        write on, which raises ``StaleError`` (and writes nothing) if another
        host holds it, or wrote to the run or to a ``cached`` read's source
        since this host read it."""
        ...

    async def renew(self, holder: str, until: float) -> bool:
        """Extend the lease ``hold`` asked for, if taken; ``False`` if lost."""
        ...

    async def let_go(self, holder: str) -> None:
        """Give up the lease ``hold`` asked for, unless ``conclude`` did."""
        ...

    async def finish(self, status: RunStatus, at: float, error: str | None = None) -> None: ...

    async def end(self, info: RunInfo) -> None:
        """Write the run's final *info* and release it."""
        ...

    async def aclose(self) -> None:
        """Release the run; it stays resumable."""
        ...

    async def stale(self) -> bool:
        """Whether another host wrote to the run since this handle last did:
        then what the caller holds of it must be read again. (Until it is,
        the handle's writes raise ``StaleError`` and keep nothing.)"""
        ...


class RunReader(Protocol):
    """What ``roster server runs`` and ``stats`` read, daemon up or down."""

    async def info(self, run: str) -> RunInfo:
        """Raises ``NotFoundError`` for an unknown run."""
        ...

    async def all(self) -> RunList:
        """Every run that can be read, oldest first; each that cannot (its
        info emptied or edited by hand) named with why, and logged."""
        ...

    async def newest(self, limit: int | None, before: str | None = None) -> list[RunInfo]:
        """``runs.list``'s page: of the runs ``all`` lists, the newest
        *limit* that come before run *before* (every one before it without
        *limit*), oldest first. An unknown *before*, or one that cannot be
        read, is ``NotFoundError``."""
        ...

    async def context(self, run: str) -> list[ContextRecord]: ...

    async def context_until(
        self, run: str, enough: Callable[[ContextRecord], bool]
    ) -> list[ContextRecord]:
        """The run's trace from its first record until one *enough* says
        so, that one included, or its end: what the start of a long trace
        holds costs what is read of it."""
        ...

    async def transcript(self, run: str) -> list[TranscriptEntry]: ...

    async def export(self, run: str) -> bytes:
        """The run's trace as ``runs/<run>/context.jsonl`` holds it, byte for
        byte, whole lines only."""
        ...


class RunStore(RunReader, Protocol):
    """Runs with their trace and transcript, sessions' frozen state, and
    which session each (worker, channel) pair has open."""

    def new_id(self, prefix: str, now: float) -> str: ...

    async def create(self, info: RunInfo) -> ActiveRun: ...

    async def reopen(self, info: RunInfo) -> tuple[ActiveRun, list[TranscriptEntry]]:
        """Open a run for appending again, with its transcript so far."""
        ...

    async def recover(self, now: float) -> int:
        """Mark open task and direct runs that no live host holds a lease on
        interrupted (their host's stop cut them off); their count. Sessions
        stay open: they resume from their transcript. One that no pair leads
        to, a stop cut off while it started, is ended ``failed`` and counted:
        on files, where the daemon is the only host, at its start; on a
        database, once no live host holds a lease on it or on the session it
        continues (what its start or rollover holds). Called at a host's
        start and then every lease renewal round: a run under way always
        holds its lease, so only a dead host's runs are marked."""
        ...

    async def write_info(self, info: RunInfo) -> None: ...

    async def save_session(self, run: str, state: SessionState) -> None: ...

    async def load_session(self, run: str) -> SessionState | None: ...

    async def session_for(self, worker: str, channel: str) -> str | None: ...

    async def set_session(self, worker: str, channel: str, session: str) -> None: ...

    async def clear_session(self, worker: str, channel: str) -> None: ...

    async def lease(self, run: str, holder: str, now: float, until: float) -> str | None:
        """Take or extend *run*'s lease for *holder* until *until*: ``None``
        when granted, else the host holding it (its lease runs past *now*).
        Turns of one session take its lease, so they never interleave
        across hosts."""
        ...

    async def release(self, run: str, holder: str) -> None:
        """Give up *holder*'s lease on *run*."""
        ...


class PrefixStore(Protocol):
    """The last compiled prefix of each (worker, channel), kept across restarts."""

    async def get(
        self, worker: str, channel: str | None, *, cached: bool = False
    ) -> PrefixState | None: ...

    async def put(self, worker: str, channel: str | None, state: PrefixState) -> None: ...


class State(Protocol):
    """One backend's stores, opened and closed together."""

    @property
    def channels(self) -> ChannelStore: ...

    @property
    def memory(self) -> MemoryStore: ...

    @property
    def gates(self) -> GateStore: ...

    @property
    def tasks(self) -> TaskStore: ...

    @property
    def runs(self) -> RunStore: ...

    @property
    def prefixes(self) -> PrefixStore: ...

    async def aclose(self) -> None: ...
