"""Warm sessions: one per (worker, channel), with a frozen system part.

The system part is compiled once when the session starts and stored next to
the transcript; each turn compiles only fresh input and appends it, so turn
N's request is turn N-1's request plus new messages, byte for byte.
"""

from __future__ import annotations

import logging
from typing import Literal

import anyio

from .._errors import CompileError, EngineError, SessionError, ShutdownError
from ..compiler import (
    ChannelMessage,
    RunMeta,
    SystemPrompt,
    TurnInput,
    compile_system,
    compile_turn,
)
from ..engines import DeltaSink
from ..org import Surface
from ._host import Host, TurnOutcome
from ._runs import ActiveRun, RunInfo, SessionState, TranscriptEntry, chat_messages

__all__ = ("Session", "SessionManager", "SessionState")

log = logging.getLogger("rosterd.sessions")


class Session:
    """A warm chat. Turns are serialised in arrival order by a FIFO lock."""

    def __init__(
        self,
        host: Host,
        run: ActiveRun,
        state: SessionState,
        entries: list[TranscriptEntry],
        history: tuple[ChannelMessage, ...],
    ) -> None:
        self._host = host
        self._run = run
        self._state = state
        self._transcript = chat_messages(entries)
        self._turns = max(run.last_turn, *(entry.turn for entry in entries), 0)
        self._last_input_tokens = next(
            (e.usage.input_tokens for e in reversed(entries) if e.usage is not None), None
        )
        self._history = history
        self._lock = anyio.Lock()
        self.last_activity = entries[-1].at if entries else run.info.created_at
        # Gates resolved after this show their outcome in the next briefing.
        self._briefed_at = next(
            (e.at for e in reversed(entries) if e.role == "user"), run.info.created_at
        )
        self.closed = False

    def __repr__(self) -> str:
        return f"Session({self.id!r}, {self.worker}/{self.channel}, {self._turns} turns)"

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
    def turns(self) -> int:
        return self._turns

    @property
    def system(self) -> SystemPrompt:
        return self._state.system

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def send(self, text: str, sender: str, on_delta: DeltaSink) -> TurnOutcome:
        async with self._lock:
            if self.closed:
                raise SessionError(f"session {self.id!r} is closed")
            host = self._host
            turn = self._turns + 1
            turn_input = TurnInput(
                text=text,
                sender=sender,
                memory=await host.stores.memory.items(self.worker),
                gates=host.stores.gates.briefing_for(self.worker, self._briefed_at),
                history=self._history if turn == 1 else None,
            )
            meta = RunMeta(run=self.id, turn=turn, now=host.clock())
            try:
                outcome = await host.run_turn(
                    self._run,
                    self._state.engine,
                    lambda: compile_turn(self._state.system, turn_input, meta),
                    self._transcript,
                    on_delta,
                    previous_input_tokens=self._last_input_tokens,
                )
            except (CompileError, EngineError, ShutdownError) as exc:
                # The failure is traced under this turn number: the next turn
                # gets the next one. After an engine failure or a stop the user
                # turn, briefing included, is in the transcript and will be sent.
                self._turns = turn
                self.last_activity = host.clock()
                if not isinstance(exc, CompileError):
                    self._briefed_at = meta.now
                raise
            self._turns = turn
            self._briefed_at = meta.now
            self._last_input_tokens = outcome.reply.usage.input_tokens
            self.last_activity = host.clock()
            await host.stores.channels.post_many(
                self.channel,
                [(sender, text, meta.now), (self.worker, outcome.reply.text, self.last_activity)],
            )
            return outcome

    async def close(self, status: Literal["closed", "expired"]) -> None:
        """End the session for good (``closed`` or ``expired``)."""
        async with self._lock:
            if self.closed:
                return
            self.closed = True
            await self._host.runs.clear_session(self.worker, self.channel)
            await self._run.finish(status, self._host.clock())

    async def detach(self) -> None:
        """Release files on daemon shutdown; the session stays resumable."""
        async with self._lock:
            self.closed = True
            await self._run.aclose()


class SessionManager:
    """Finds, starts, resumes and expires sessions."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self._by_pair: dict[tuple[str, str], Session] = {}
        self._by_id: dict[str, Session] = {}
        self._open_lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"SessionManager({len(self._by_id)} warm)"

    def __len__(self) -> int:
        return len(self._by_id)

    def sessions(self) -> list[Session]:
        return list(self._by_id.values())

    def get(self, session_id: str) -> Session:
        session = self._by_id.get(session_id)
        if session is None or session.closed:
            raise SessionError(f"no open session {session_id!r}; open one with session.open")
        return session

    async def open(self, worker: str, channel: str) -> Session:
        host = self._host
        scope = host.org.scope(Surface.SESSION, worker, channel)
        async with self._open_lock:
            session = self._by_pair.get((worker, channel))
            if session is not None and not session.closed:
                return session
            session = await self._resume(worker, channel) or await self._start(
                scope.worker, channel
            )
            self._by_pair[(worker, channel)] = session
            self._by_id[session.id] = session
            return session

    async def close(self, session_id: str) -> None:
        session = self.get(session_id)
        await session.close("closed")
        self._forget(session)

    async def expire_idle(self) -> None:
        idle = self._host.org.daemon.session_idle_s
        now = self._host.clock()
        for session in self.sessions():
            if not session.busy and now - session.last_activity >= idle:
                log.info("session %s expired after %.0f s idle", session.id, idle)
                await session.close("expired")
                self._forget(session)

    async def run_reaper(self) -> None:
        while True:
            await anyio.sleep(min(5.0, self._host.org.daemon.session_idle_s / 4))
            await self.expire_idle()

    async def aclose(self) -> None:
        for session in self.sessions():
            await session.detach()
        self._by_id.clear()
        self._by_pair.clear()

    def _forget(self, session: Session) -> None:
        self._by_id.pop(session.id, None)
        if self._by_pair.get((session.worker, session.channel)) is session:
            del self._by_pair[(session.worker, session.channel)]

    async def _resume(self, worker: str, channel: str) -> Session | None:
        host = self._host
        session_id = await host.runs.session_for(worker, channel)
        if session_id is None:
            return None
        info = await host.runs.info(session_id)
        state = await host.runs.load_session(session_id)
        if info.status != "open" or state is None:
            await host.runs.clear_session(worker, channel)
            return None
        run, entries = await host.runs.reopen(info)
        last = entries[-1].at if entries else info.created_at
        if host.clock() - last >= host.org.daemon.session_idle_s:
            log.info("session %s had expired while the daemon was down", session_id)
            await host.runs.clear_session(worker, channel)
            await run.finish("expired", host.clock())
            return None
        history = await self._history(channel, state.system) if not entries else ()
        log.info("session %s resumed with %d transcript entries", session_id, len(entries))
        return Session(host, run, state, entries, history)

    async def _start(self, worker: str, channel: str) -> Session:
        host = self._host
        org = host.org
        scope = org.scope(Surface.SESSION, worker, channel)
        now = host.clock()
        session_id = host.runs.new_id("s", now)
        meta = RunMeta(run=session_id, turn=0, now=now)
        run = await host.runs.create(
            RunInfo(
                id=session_id,
                surface=Surface.SESSION.value,
                worker=worker,
                channel=channel,
                created_at=now,
            )
        )
        try:
            system = compile_system(org, scope, meta)
        except CompileError as exc:
            if exc.record is not None:
                await run.trace(exc.record)
            await run.finish("failed", now, error=str(exc))
            raise
        state = SessionState(system=system, engine=org.engine_for(worker))
        await host.runs.save_session(session_id, state)
        await run.trace(system.record(meta))
        await host.runs.set_session(worker, channel, session_id)
        history = await self._history(channel, system)
        log.info("session %s started for %s in %s", session_id, worker, channel)
        return Session(host, run, state, [], history)

    async def _history(self, channel: str, system: SystemPrompt) -> tuple[ChannelMessage, ...]:
        return await self._host.stores.channels.recent(channel, system.budget.history_messages)
