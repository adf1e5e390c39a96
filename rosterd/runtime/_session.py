"""Warm sessions: one per (worker, channel), with a frozen system part.

The system part is compiled once when the session starts and stored next to
the transcript; each turn compiles only fresh input and appends it, so turn
N's request is turn N-1's request plus new messages, byte for byte.

A session is bounded: when a turn's request would pass ``[context]
session_chars``, or the provider refuses it as too long, the session ends as
``rolled-over`` and the same turn is answered by a new session of the pair,
whose system part is compiled afresh and whose first turn carries history
(and, when a later tool step was refused, the tool steps the turn made:
the new session goes on from them, never making their calls again).
Turns queued behind the rollover, and callers still holding the old id, go
to the new session.

Where several hosts share the store, a turn holds the session's lease (see
``LeaseKeeper.run``), and a host whose copy of the session another
host has written to since reads it again before the turn: any host
continues any session from the frozen system part and transcript, so its
request extends the previous one byte for byte.

A warm session's turn first goes on what this host holds (``LeaseKeeper.
turn``, reads ``cached``): the turn's first write takes the lease and checks
that nothing it read moved on. When something did, nothing was written:
the turn starts again the careful way, waiting for the lease, reading the
session again if another host wrote to it, and its inputs from the store.
On a database that makes a warm turn two round trips (docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import pairwise
from typing import Literal

import anyio
import msgspec

from .._errors import (
    EngineError,
    InvalidIdError,
    NotFoundError,
    SessionError,
    StaleError,
    StorageError,
)
from ..compiler import (
    CONTEXT_MESSAGES,
    ChannelMessage,
    Compilation,
    CompileError,
    RolloverTrace,
    RunMeta,
    SystemPrompt,
    ToolCall,
    ToolResult,
    TurnInput,
    compile_system,
    compile_turn,
    memory_view,
    message_texts,
)
from ..engines import DeltaSink, WaitSink
from ..org import Surface
from ..protocol import ChatMessage, TranscriptEntry, chat_messages
from ..stores import ActiveRun, Posts, SessionState
from ._host import CarriedSteps, Host, TurnOutcome
from ._lifetime import RECENT_GAPS, plan_cache
from ._progress import Progress
from ._shown import ShownLedger
from ._warm import WarmUp

log = logging.getLogger("rosterd.sessions")

# A chain of rollovers longer than this is followed no further (a loop in
# hand-edited state must not hang a request).
_MAX_ROLLOVERS = 1000

# The result of a call whose turn was cut short before its result was recorded.
_CUT_SHORT = (
    "not answered: the turn that made this call was cut short (the daemon stopped, or a "
    "write failed) before its result was recorded; whether it took effect is unknown"
)


class _SessionFull(Exception):
    """The next request would pass ``session_chars``; never leaves this module."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _TooLong(Exception):
    """The provider refused a step of the turn as too long (*error*), after
    the turn's tool steps *made* (their calls answered, perhaps by the
    gateway); never leaves this module."""

    def __init__(self, error: EngineError, made: tuple[ChatMessage, ...]) -> None:
        super().__init__(str(error))
        self.error = error
        self.made = made


class Session:
    """A warm chat. Turns are serialised in arrival order by a FIFO lock,
    the one every session of its (worker, channel) on this host shares: a
    turn that waited through a rollover goes to the successor in its place,
    before any that came later."""

    def __init__(
        self,
        host: Host,
        manager: SessionManager,
        run: ActiveRun,
        state: SessionState,
        entries: list[TranscriptEntry],
        history: tuple[ChannelMessage, ...],
        seen: int,
        *,
        briefed_at: float | None = None,
    ) -> None:
        self._host = host
        self._manager = manager
        self._state = state
        self._lock = manager.turn_lock(run.info.worker, run.info.channel)
        self.closed = False
        # Set when this session rolled over: its turns go there from then on.
        self.successor: Session | None = None
        # Set from when a close is asked for (or an expiry holds the lock)
        # until the session is closed or kept; how many such ends are
        # under way.
        self._end_under_way: anyio.Event | None = None
        self._ends = 0
        self._load(run, entries, history, seen, briefed_at)

    def _load(
        self,
        run: ActiveRun,
        entries: list[TranscriptEntry],
        history: tuple[ChannelMessage, ...],
        seen: int,
        briefed_at: float | None,
    ) -> None:
        """Take the run's transcript as it is: at the start, or after another
        host added turns."""
        self._run = run
        self._transcript = chat_messages(entries)
        self._shown = ShownLedger.from_entries(entries)
        self._history = history
        self._progress = Progress.resumed(
            entries,
            len(self._state.system.text),
            self._transcript,
            last_turn=run.last_turn,
            created_at=run.info.created_at,
            seen=seen,
            briefed_at=briefed_at,
        )

    def _commit(self, progress: Progress) -> None:
        """Make *progress* the session's: the transcript holds as many
        messages as it says (a refused turn's are dropped with it)."""
        self._progress = progress
        del self._transcript[progress.messages :]

    def __repr__(self) -> str:
        return f"Session({self.id!r}, {self.worker}/{self.channel}, {self._progress.turns} turns)"

    @property
    def id(self) -> str:
        return self._run.info.id

    @property
    def worker(self) -> str:
        return self._run.info.worker

    @property
    def channel(self) -> str:
        assert self._run.info.channel is not None
        return self._run.info.channel

    @property
    def progress(self) -> Progress:
        """Where the session stands between turns: its turns, its last
        activity, when it was last briefed (a successor goes on from there)."""
        return self._progress

    @property
    def system(self) -> SystemPrompt:
        return self._state.system

    @property
    def busy(self) -> bool:
        """Whether a turn (or a close) of the pair is under way here."""
        return self._lock.locked()

    async def send(
        self, text: str, sender: str, on_delta: DeltaSink, on_wait: WaitSink | None = None
    ) -> TurnOutcome:
        arrived = time.perf_counter()
        if self._lock.locked():
            log.debug("session %s: a turn waits for the turn under way", self.id)
        async with self._lock:
            session = self
            while True:
                # Rolled over while the turn waited, here or on another host.
                while session.successor is not None:
                    session = session.successor
                if session.closed:
                    raise SessionError(f"session {session.id!r} is closed")
                outcome = await session._take_turn(text, sender, on_delta, on_wait, arrived)
                if outcome is not None:
                    return outcome

    async def _take_turn(
        self,
        text: str,
        sender: str,
        on_delta: DeltaSink,
        on_wait: WaitSink | None,
        arrived: float,
    ) -> TurnOutcome | None:
        """The turn, with the pair's lock held; ``None`` when another host
        closed the session or rolled it over meanwhile."""
        host = self._host
        try:
            async with host.leases.turn(self._run):
                host.telemetry.waited(time.perf_counter() - arrived)
                return await self._send(text, sender, on_delta, on_wait, warm=True)
        except StaleError as stale:
            log.info("session %s: turn started again: %s", self.id, stale)
        async with host.leases.run(self.id):
            await self._catch_up()
            if self.successor is None and not self.closed:
                return await self._send(text, sender, on_delta, on_wait)
        return None

    async def _catch_up(self) -> None:
        """Read the session again if another host wrote to it since we did."""
        if not await self._run.stale():
            return
        runs = self._host.runs
        info = await runs.info(self.id)
        await self._run.aclose()
        if info.status != "open":
            self.closed = True
            self._manager.forget(self)
            if info.status == "rolled-over" and info.rolled_to is not None:
                self.successor = await self._manager.get(info.rolled_to)
            return
        run, entries = await runs.reopen(info)
        log.info("session %s: read again after turns on another host", self.id)
        progress = self._progress
        self._load(run, entries, self._history, progress.seen, progress.briefed_at)

    async def _send(
        self,
        text: str,
        sender: str,
        on_delta: DeltaSink,
        on_wait: WaitSink | None,
        *,
        warm: bool = False,
    ) -> TurnOutcome:
        """One turn, with the lock and the lease held (*warm*: to be taken
        by the turn's first write)."""
        # Only a conversation can be dropped: a fresh session's first
        # request is as short as this pair's requests get.
        may_roll = bool(self._transcript)
        telemetry = self._host.telemetry
        made: tuple[ChatMessage, ...] = ()
        try:
            return await self._turn(text, sender, on_delta, on_wait, may_roll=may_roll, warm=warm)
        except _SessionFull as full:
            if warm:
                # A rollover writes before the turn does: under the lease.
                raise StaleError(f"a rollover first takes the lease of {self.id}") from None
            reason = full.reason
            telemetry.rolled_over("session_chars")
        except _TooLong as refused:
            reason = f"the provider refused the request as too long: {refused.error}"
            made = refused.made
            telemetry.rolled_over("provider_too_long")
        return await self._roll_over(text, sender, on_delta, on_wait, reason, made)

    async def _input(
        self, text: str, sender: str, turn: int, *, cached: bool
    ) -> tuple[TurnInput, int]:
        """Turn *turn*'s fresh input, and the last channel seq it covers."""
        host = self._host
        progress = self._progress
        backlog, omitted, last_seq = await host.stores.channels.since(
            self.channel,
            progress.seen,
            exclude_run=self.id,
            limit=self._state.system.budget.backlog_messages,
            cached=cached,
        )
        fresh = TurnInput(
            text,
            sender,
            history=self._history if turn == 1 else None,
            backlog=backlog,
            backlog_omitted=omitted,
            shown=self._shown.items(),
            recent=self._said_before(backlog, turn),
            previous_turn_at=progress.briefed_at if turn > 1 else None,
        )
        turn_input = await host.turn_input(self.worker, fresh, progress.briefed_at, cached=cached)
        self._shown.note_written(memory_view(turn_input.memory).written_by(self.id))
        return turn_input, last_seq

    def _said_before(self, backlog: tuple[ChannelMessage, ...], turn: int) -> tuple[str, ...]:
        """The latest messages of the conversation before this turn's,
        oldest first: the transcript's (a resumed session reads the same
        ones), then the history or what others posted since."""
        said: list[str] = []
        for message in reversed(self._transcript[-8:]):
            if message.role == "user":
                said[:0] = message_texts(message.content)
                if len(said) >= CONTEXT_MESSAGES:
                    break
        if turn == 1:
            said += (m.text for m in self._history)
        said += (m.text for m in backlog)
        return tuple(said[-CONTEXT_MESSAGES:])

    async def _turn(
        self,
        text: str,
        sender: str,
        on_delta: DeltaSink,
        on_wait: WaitSink | None,
        *,
        may_roll: bool,
        warm: bool = False,
        carried: CarriedSteps | None = None,
    ) -> TurnOutcome:
        host = self._host
        cut = _unanswered(self._transcript)
        if cut:
            if warm:
                # Their results are written before the turn is: under the lease.
                raise StaleError(f"calls a turn of {self.id} cut short are answered first")
            await self._answer_cut_short(cut)
        before = self._progress
        turn = before.turns + 1
        self._shown.going_on(turn)
        turn_input, last_seq = await self._input(text, sender, turn, cached=warm)
        meta = RunMeta(run=self.id, turn=turn, now=host.clock())
        plan = plan_cache(self._state.engine, self._gaps(meta.now), before.last_ttl)
        if plan is not None:
            plan = msgspec.structs.replace(plan, previous_message=before.last_reply_id)
        limit = self._state.system.budget.session_chars
        compiled = False

        def compile_checked() -> Compilation:
            nonlocal compiled
            compilation = compile_turn(self._state.system, turn_input, meta)
            compiled = True
            size = before.chars + len(compilation.input_text)
            if may_roll and size > limit:
                raise _SessionFull(
                    f"the request of turn {turn} would be {size} characters, "
                    f"over session_chars {limit}"
                )
            return compilation

        try:
            outcome = await host.run_turn(
                self._run,
                self._state.engines(),
                compile_checked,
                self._transcript,
                on_delta,
                on_wait=on_wait,
                previous_input_tokens=before.last_input_tokens,
                seen=last_seq,
                cache_plan=plan,
                cached=warm,
                carried=carried,
            )
        except BaseException as exc:
            if isinstance(exc, EngineError) and exc.context_exceeded and may_roll:
                # Refused as too long, every tool step of it included: it is
                # not part of what this session sends, and what it briefed
                # and showed is still owed. A new session answers it, going
                # on from the tool steps made here: their calls ran.
                made = _tool_steps(self._transcript[before.messages :])
                self._commit(before.failed(turn, host.clock(), briefed_at=before.briefed_at))
                raise _TooLong(exc, made) from exc
            self._commit(self._cut_short(before, turn, meta.now, last_seq))
            raise
        finally:
            self._traced(turn, compiled)
        ttl = plan.ttl if plan is not None else None
        answered = before.answered(turn, meta.now, host.clock(), ttl, outcome.reply)
        self._commit(self._sent(answered, turn, last_seq))
        said = (
            (sender, text, meta.now),
            (self.worker, outcome.reply.text, self._progress.last_activity),
        )
        # The reply and the posts durable together, before the client hears of them.
        await self._run.conclude(Posts(self.channel, said, run=self.id))
        return outcome

    async def _answer_cut_short(self, calls: Sequence[ToolCall]) -> None:
        """Answer *calls*, those of a reply whose turn was cut short before
        their results were recorded (kill -9, a failed write, a stop while
        the gateway had them): both APIs refuse a request whose tool calls
        have no results, so every later turn of the session would fail.
        Each gets an ``error`` result, traced and recorded as the next step
        of that turn, and the next request extends the last one sent."""
        host = self._host
        # Rare: read back which turn and step the calls were made at.
        entries = await host.runs.transcript(self.id)
        turn, step = next(
            ((e.turn, e.step) for e in reversed(entries) if e.role == "assistant" and e.calls),
            (self._progress.turns, 1),
        )
        log.warning(
            "session %s: answering %d calls turn %d left unanswered", self.id, len(calls), turn
        )
        results = [ToolResult(call.id, call.name, "error", _CUT_SHORT) for call in calls]
        system = self._state.system
        first = system.record(RunMeta(run=self.id, turn=turn, now=host.clock()))
        await host.record_results(self._run, first, system, self._transcript, step + 1, results)
        progress = self._progress
        self._commit(self._sent(progress, turn, progress.seen))

    def _traced(self, turn: int, compiled: bool) -> None:
        """Once turn *turn*'s compilation ran whole and its record is
        durable, the next record's memory and briefing blocks say only what
        changed since. A compilation that failed traced neither, and one
        whose write did not land (a warm turn that found its reads stale)
        traced nothing: the next record then says what they would have."""
        if compiled and self._run.last_turn >= turn:
            self._shown.traced(turn)

    def _cut_short(self, before: Progress, turn: int, sent_at: float, last_seq: int) -> Progress:
        """The session's progress after turn *turn* failed (compiling,
        writing, at the engine, or stopped). Once the turn's trace is
        durable, its number is taken and the next turn gets the next one;
        what it added to the transcript, briefing included, is there and
        will be sent. A turn that wrote nothing leaves its number free."""
        if self._run.last_turn < turn:
            return before
        sent = len(self._transcript) > before.messages
        failed = before.failed(
            turn, self._host.clock(), briefed_at=sent_at if sent else before.briefed_at
        )
        return self._sent(failed, turn, last_seq)

    def _sent(self, progress: Progress, turn: int, last_seq: int) -> Progress:
        """*progress* with what turn *turn* added to the transcript: the
        conversation now holds it, the backlog (up to *last_seq*) included."""
        added = self._transcript[progress.messages :]
        self._shown.note_sent(turn, added)
        return progress.sent(added, last_seq)

    def _gaps(self, now: float) -> list[float]:
        """Seconds between the recent turns (a fresh session's, between its
        channel's recent messages), the time since the last one included."""
        times = list(self._progress.turn_times)
        if len(times) < 2:
            times = sorted([m.at for m in self._history] + times)
        times = [*times[-RECENT_GAPS:], now]
        return [later - earlier for earlier, later in pairwise(times) if later > earlier]

    async def _roll_over(
        self,
        text: str,
        sender: str,
        on_delta: DeltaSink,
        on_wait: WaitSink | None,
        reason: str,
        made: tuple[ChatMessage, ...],
    ) -> TurnOutcome:
        """End this session as ``rolled-over`` and answer *text* in a new one,
        going on from the tool steps the turn *made* here (see ``CarriedSteps``).

        Called with the pair's lock held. If the new session cannot
        start (its scope is now over budget), or this one cannot be ended,
        this one stays as it was. It is ended, naming its successor, before
        the pair's pointer moves on: after a kill between the two, the
        pointer leads through this session to the successor, and the pair
        never has two open sessions; a pointer that did not move is moved
        by the pair's next open.
        """
        log.debug("session %s: rolling over: %s", self.id, reason)
        successor = await self._manager.roll_over(self, reason)
        # It shares the pair's lock, held here: the turns waiting for it go
        # to the successor after this one, in the order they came.
        host = self._host
        info = msgspec.structs.replace(
            self._run.info,
            status="rolled-over",
            ended_at=host.clock(),
            rolled_to=successor.id,
            rollover=reason,
        )
        try:
            await self._run.end(info)
        except BaseException as exc:
            # Nothing leads to the successor: it ends before its first turn.
            successor.closed = True
            with anyio.CancelScope(shield=True):
                error = f"the session it continues did not end: {exc}"
                await _abandon(successor._run, host.clock(), error)
            raise
        self.successor = successor
        self.closed = True
        log.info("session %s rolled over to %s: %s", self.id, successor.id, reason)
        self._manager.adopt(self, successor)
        await self._manager.move_pointer(successor)
        carried = CarriedSteps(RolloverTrace(self.id, reason), made) if made else None
        async with host.leases.run(successor.id):
            # The first turn of a fresh session never rolls over again: one
            # refused as too long, with the steps carried over too, fails
            # (never repeating a call that ran).
            outcome = await successor._turn(
                text, sender, on_delta, on_wait, may_roll=False, carried=carried
            )
        return msgspec.structs.replace(outcome, rolled_from=self.id)

    async def close(self) -> None:
        """End the session for good as ``closed``, and forget it; closing one
        that rolled over, on another host or while the close waited for its
        turn, closes its successor."""
        # Marked before it waits for a turn under way: an open meanwhile
        # waits for the close and gets a fresh session, not this one.
        with self._ending("closed"):
            if self._lock.locked():
                log.debug("session %s: a close waits for the turn under way", self.id)
            async with self._lock:
                if not self.closed and await self._end("closed"):
                    return
        if self.successor is not None:
            await self.successor.close()

    async def expire(self, idle_s: float) -> bool:
        """End the session as ``expired`` if no turn came for *idle_s*
        seconds; whether it is closed.

        A turn under way here, or one another host made since this copy
        read it, keeps the session. An end under way (an expiry or a close)
        is waited for first.
        """
        if await self._ended():
            return True
        if self.busy or self._host.clock() - self._progress.last_activity < idle_s:
            return False
        # The lock is free, so taken without a pause: the end is marked
        # before anything else runs, and no turn starts between the look and
        # the close.
        self._lock.acquire_nowait()
        try:
            with self._ending("expired"):
                if await self.stale():
                    # Busy on another host: the next turn here reads it again.
                    return False
                log.info("session %s expired after %.0f s idle", self.id, idle_s)
                await self._end("expired")
                return self.closed
        finally:
            self._lock.release()

    async def _ended(self) -> bool:
        """Whether the session is closed, once an end of it under way here
        is over: whoever finds it meanwhile then finds it closed (or kept),
        never hands it out while its end goes on."""
        while (ending := self._end_under_way) is not None:
            log.debug("session %s: waits for its end under way", self.id)
            await ending.wait()
        return self.closed

    @property
    def ending(self) -> anyio.Event | None:
        """Set once an end of the session under way here (see ``_ending``)
        is over; ``None`` when none is."""
        return self._end_under_way

    @contextmanager
    def _ending(self, status: Literal["closed", "expired"]) -> Iterator[None]:
        """Mark the session as ending as *status* (see ``_ended``) until the
        end is written or given up; a close asked for meanwhile shares the
        mark, which lasts until the last of them is over."""
        log.debug("session %s: ending as %s", self.id, status)
        if self._end_under_way is None:
            self._end_under_way = anyio.Event()
        self._ends += 1
        try:
            yield
        finally:
            self._ends -= 1
            if not self._ends:
                ending, self._end_under_way = self._end_under_way, None
                ending.set()

    async def _end(self, status: Literal["closed", "expired"]) -> bool:
        """End the session as *status*, with the pair's lock held, unless
        another host closed it or rolled it over meanwhile; whether it did."""
        async with self._host.leases.run(self.id):
            await self._catch_up()
            if self.closed:
                return False
            # Ended before the pointer goes: a close that fails leaves the
            # session as it was, and a pointer left to an ended session is
            # cleared by the pair's next open.
            await self._run.finish(status, self._host.clock())
            self.closed = True
            self._manager.forget(self)
            try:
                await self._host.runs.clear_session(self.worker, self.channel)
            except StorageError as exc:
                log.warning("session %s: its pointer stays: %s", self.id, exc)
            return True

    async def stale(self) -> bool:
        """Whether another host wrote to this session since this copy did."""
        return await self._run.stale()

    async def refresh(self) -> None:
        """Read the session again if another host wrote to it, unless a turn
        here is under way (that turn catches up itself)."""
        if not self.busy:
            async with self._lock:
                await self._catch_up()

    async def detach(self) -> None:
        """Release files on daemon shutdown; the session stays resumable."""
        async with self._lock:
            self.closed = True
            await self._run.aclose()


class SessionManager:
    """Finds, starts, resumes and expires sessions."""

    def __init__(
        self, host: Host, refresh_org: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self._host = host
        # Brings host.org up to date with the files before a rollover compiles.
        self._refresh_org = refresh_org
        self._by_pair: dict[tuple[str, str], Session] = {}
        self._by_id: dict[str, Session] = {}
        # One per pair ever served here (a few hundred bytes each): its
        # sessions' turns, across rollovers, wait on it in arrival order.
        self._turn_locks: dict[tuple[str, str | None], anyio.Lock] = {}
        self._open_lock = anyio.Lock()
        # The workers whose sessions a start found open, indexed as it serves.
        self.warm_up = WarmUp(host)

    def __repr__(self) -> str:
        return f"SessionManager({len(self)} warm)"

    def turn_lock(self, worker: str, channel: str | None) -> anyio.Lock:
        """The lock the turns of every session of the pair take."""
        return self._turn_locks.setdefault((worker, channel), anyio.Lock())

    def sessions(self) -> list[Session]:
        # Ids of rolled-over sessions are kept as aliases of their successor.
        return [s for key, s in self._by_id.items() if key == s.id]

    def __len__(self) -> int:
        return len(self.sessions())

    async def get(self, session_id: str) -> Session:
        """The open session *session_id*: warm here, or woken from the store
        (another host's, or this one's before a restart)."""
        session = self._by_id.get(session_id)
        if session is None:
            session = await self._wake(session_id)
        if session is None or session.closed or await self._expired(session):
            raise SessionError(f"no open session {session_id!r}; open one with session.open")
        return session

    def adopt(self, previous: Session, successor: Session) -> None:
        """*successor* replaces *previous*; *previous*'s id keeps working."""
        for key, session in list(self._by_id.items()):
            if session is previous:
                self._by_id[key] = successor
        self._by_id[successor.id] = successor
        self._by_pair[(successor.worker, successor.channel)] = successor

    async def open(self, worker: str, channel: str) -> Session:
        host = self._host
        scope = host.org.scope(Surface.SESSION, worker, channel)
        while True:
            # Held while a host finds or starts the pair's session: two hosts
            # opening it at once agree on one.
            async with self._open_lock, host.leases.run(f"open:{worker}:{channel}"):
                session = self._by_pair.get((worker, channel))
                ending = session.ending if session is not None else None
                if session is None or ending is None:
                    return await self._open(scope.worker, channel, session)
            # An end of it is under way (a close waiting for a turn, say):
            # waited for without the lock, so that opens of other pairs go on.
            log.debug("session %s: waits for its end under way", session.id)
            await ending.wait()

    async def _open(self, worker: str, channel: str, session: Session | None) -> Session:
        """The pair's session, with the open lock held: *session* if it is
        still the pair's and open, else one resumed from the store or new."""
        host = self._host
        current = await host.runs.session_for(worker, channel)
        if session is not None and session.id != current:
            if current is not None and self._by_id.get(current) is session:
                # The pointer names a session this one continues: it
                # did not move with the rollover (a failed write).
                await self.move_pointer(session)
            else:
                # Another host rolled it over or closed it: drop the old copy.
                self.forget(session)
                await session.detach()
                session = None
        if session is not None and not session.closed and not await self._expired(session):
            await session.refresh()
            if not session.closed:  # closed or rolled over elsewhere meanwhile
                return session
        session = await self._resume(worker, channel) or await self.start(worker, channel)
        self._by_pair[(worker, channel)] = session
        self._by_id[session.id] = session
        return session

    async def close(self, session_id: str) -> None:
        session = await self.get(session_id)
        await session.close()

    async def expire_idle(self) -> None:
        for session in self.sessions():
            if session.ending is not None:
                # Being closed, perhaps after a long turn: the round goes on.
                continue
            try:
                await self._expired(session)
            except StorageError as exc:
                # The store is unreachable: the next round tries again.
                log.warning("session %s: idle check failed: %s", session.id, exc)

    async def _expired(self, session: Session) -> bool:
        """Expire *session* if it has been idle too long; whether it is closed.

        Checked on every use as well as by the reaper, so a session expires
        at its idle limit exactly, whatever the reaper's pace.
        """
        return await session.expire(self._host.org.daemon.session_idle_s)

    async def run(self) -> None:
        """While the daemon serves: the warm-up once, and the reaper of idle
        sessions throughout."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.warm_up.run)
            await self._reap()

    async def _reap(self) -> None:
        while True:
            # On the host's clock: a test that moves its clock wakes the reaper.
            await self._host.clock.sleep(min(5.0, self._host.org.daemon.session_idle_s / 4))
            await self.expire_idle()

    async def aclose(self) -> None:
        for session in self.sessions():
            await session.detach()
        self._by_id.clear()
        self._by_pair.clear()

    def forget(self, session: Session) -> None:
        for key in [key for key, value in self._by_id.items() if value is session]:
            del self._by_id[key]
        if self._by_pair.get((session.worker, session.channel)) is session:
            del self._by_pair[(session.worker, session.channel)]

    async def _resume(self, worker: str, channel: str) -> Session | None:
        host = self._host
        session_id = await host.runs.session_for(worker, channel)
        if session_id is None:
            return None
        session = await self._wake(session_id)
        if session is None:
            await host.runs.clear_session(worker, channel)
        elif session.id != session_id:
            # Reached through a rollover whose pointer never moved (a kill
            # between the old session's end and the move).
            await self.move_pointer(session)
        return session

    async def move_pointer(self, session: Session) -> None:
        """Point the pair at *session*, from a session it continues. One
        left behind still leads to it (the pair's next open or start moves
        it): a rollover goes on without it."""
        try:
            await self._host.runs.set_session(session.worker, session.channel, session.id)
        except StorageError as exc:
            log.warning("session %s: the pair's pointer stays behind it: %s", session.id, exc)

    async def _wake(self, session_id: str) -> Session | None:
        """The open session *session_id* read from the store, rollovers
        followed; ``None`` when there is none such (or it idled out)."""
        host = self._host
        try:
            info = await host.runs.info(session_id)
            for _ in range(_MAX_ROLLOVERS):
                if info.status != "rolled-over" or info.rolled_to is None:
                    break
                info = await host.runs.info(info.rolled_to)
        except (NotFoundError, InvalidIdError):
            return None
        warm = self._by_id.get(info.id)
        if warm is not None:
            return warm
        log.debug("session %s: reading it from the store", info.id)
        state = await host.runs.load_session(info.id)
        if info.status != "open" or info.surface != Surface.SESSION.value or state is None:
            return None
        run, entries = await host.runs.reopen(info)
        last = entries[-1].at if entries else info.created_at
        if host.clock() - last >= host.org.daemon.session_idle_s:
            log.info("session %s had expired while no host served it", info.id)
            await run.finish("expired", host.clock())
            return None
        assert info.channel is not None
        history, seen = await self._snapshot(info.channel, state.system)
        warm = self._by_id.get(info.id)
        if warm is not None:
            # Woken meanwhile by another call: one copy a host, whose lock
            # keeps the session's turns in order (a second copy's turns
            # would go on at once under this host's lease).
            await run.aclose()
            return warm
        log.info("session %s resumed with %d transcript entries", info.id, len(entries))
        session = Session(host, self, run, state, entries, history if not entries else (), seen)
        self._by_id[session_id] = self._by_id[session.id] = session
        self._by_pair.setdefault((session.worker, session.channel), session)
        return session

    async def roll_over(self, previous: Session, reason: str) -> Session:
        """The session that continues *previous*, from the org as it is now."""
        if self._refresh_org is not None:
            await self._refresh_org()
        return await self.start(
            previous.worker, previous.channel, rolled_from=previous, reason=reason
        )

    async def start(
        self,
        worker: str,
        channel: str,
        *,
        rolled_from: Session | None = None,
        reason: str = "",
    ) -> Session:
        """A fresh session of the pair, compiled from the current org.

        With *rolled_from*, it continues that session: the trace and run
        info name it, and the briefing goes on from where it was; the
        pair's pointer is then the rollover's to move.

        Nothing leads to a session until the pair's pointer names it, or
        the session it continues ends naming it: until then a lease says
        it is under way, not left by a dead host (``RunStore.recover``),
        its own for a fresh one, and for a rollover the lease its turn
        holds on the session it continues.
        """
        session_id = self._host.runs.new_id("s", self._host.clock())
        if rolled_from is not None:
            return await self._begin(session_id, worker, channel, rolled_from, reason)
        async with self._host.leases.run(session_id):
            return await self._begin(session_id, worker, channel, None, reason)

    async def _begin(
        self,
        session_id: str,
        worker: str,
        channel: str,
        rolled_from: Session | None,
        reason: str,
    ) -> Session:
        """Start session *session_id* (see ``start``)."""
        host = self._host
        org = host.org
        scope = org.scope(Surface.SESSION, worker, channel)
        now = host.clock()
        meta = RunMeta(run=session_id, turn=0, now=now)
        info = host.new_run(
            session_id,
            Surface.SESSION,
            worker,
            channel,
            now,
            rolled_from=rolled_from.id if rolled_from is not None else None,
            rollover=reason or None,
        )
        run = await host.runs.create(info)
        if rolled_from is not None:
            log.debug("session %s: its successor %s is created", rolled_from.id, session_id)
        try:
            system = compile_system(org, scope, meta)
        except CompileError as exc:
            if exc.record is not None:
                await run.trace(exc.record)
            await run.finish("failed", now, error=str(exc))
            raise
        primary, *fallbacks = org.engine_chain(worker)
        state = SessionState(
            system=system,
            engine=primary.config,
            engine_name=primary.name,
            fallbacks=tuple(fallbacks),
        )
        record = system.record(meta)
        if rolled_from is not None:
            record = msgspec.structs.replace(
                record, rollover=RolloverTrace(previous=rolled_from.id, reason=reason)
            )
        try:
            await host.runs.save_session(session_id, state)
            await run.trace(record)
            if rolled_from is None:
                # A rollover moves the pointer once the session it continues ended.
                await host.runs.set_session(worker, channel, session_id)
        except StorageError as exc:
            await _abandon(run, host.clock(), f"the session could not start: {exc}")
            raise
        history, seen = await self._snapshot(channel, system)
        log.info("session %s started for %s in %s", session_id, worker, channel)
        briefed_at = rolled_from.progress.briefed_at if rolled_from is not None else None
        return Session(host, self, run, state, [], history, seen, briefed_at=briefed_at)

    async def _snapshot(
        self, channel: str, system: SystemPrompt
    ) -> tuple[tuple[ChannelMessage, ...], int]:
        """The history of a waking session and the seq it reaches: later
        messages are the backlog of its turns."""
        channels = self._host.stores.channels
        seen = await channels.last_seq(channel)
        history = await channels.recent(channel, system.budget.history_messages)
        # A post landing between the two reads goes to the backlog only.
        return tuple(m for m in history if m.seq <= seen), seen


def _tool_steps(turn: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    """The tool steps of a turn's messages (its user message first): each
    reply with calls and the results after it, up to the last result (a
    reply shown in part after it is none)."""
    last = max((i for i, message in enumerate(turn) if message.role == "tool"), default=0)
    return tuple(turn[1 : last + 1])


def _unanswered(transcript: Sequence[ChatMessage]) -> list[ToolCall]:
    """The calls of the transcript's last reply that no tool message after
    it answers: none unless a turn was cut short between the two."""
    answered: set[str | None] = set()
    for message in reversed(transcript):
        if message.role != "tool":
            if message.role != "assistant":
                return []
            return [call for call in message.calls if call.id not in answered]
        answered.add(message.call)
    return []


async def _abandon(run: ActiveRun, at: float, error: str) -> None:
    """End a session run nothing leads to as ``failed``, if its end can be
    written: no pointer names it, so it would stay open for good."""
    try:
        await run.finish("failed", at, error=error)
    except StorageError as exc:
        log.error("session %s: left open, its end failed too: %s", run.info.id, exc)
