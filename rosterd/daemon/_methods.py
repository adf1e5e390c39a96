"""What each RPC method does: a thin shell over sessions, tasks and stores."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import msgspec

from .. import __version__
from .._errors import ConflictError, NotFoundError, ProtocolError
from .._paging import newest_page
from ..compiler import ChannelMessage, MemoryItem, Retirement
from ..engines import WaitSink
from ..org import Surface
from ..protocol import (
    CONTEXT_PAGE_TURNS,
    INVALID_PARAMS,
    BlockSummary,
    Call,
    ChannelPost,
    Closed,
    ContextPage,
    DaemonStatus,
    Delta,
    GateFile,
    GateList,
    GateResolve,
    GateState,
    MemoryAdd,
    MemoryForget,
    MemoryList,
    MemoryNote,
    RunDirect,
    RunInfo,
    RunsContext,
    RunShown,
    RunsList,
    RunsShow,
    SessionClose,
    SessionOpen,
    SessionOpened,
    SessionSend,
    StatusResult,
    TaskGet,
    TaskList,
    TaskState,
    TaskSubmit,
    TurnResult,
    Wait,
    WaitReason,
    compiled_system,
    context_page,
)
from ..runtime import Host, SessionManager, TaskRunner, TurnOutcome, direct_run, settled
from ._watch import OrgWatcher

Notify = Callable[[str, object], Awaitable[None]]
_C = TypeVar("_C", bound=Call[Any])
_Handler = Callable[["Methods", _C, Notify], Awaitable[object]]
# Each method's handler, by its params Struct; filled by ``@rpc``.
_HANDLERS: dict[type[Call[Any]], _Handler[Any]] = {}
# The methods this daemon serves: every one the protocol declares (tested).
HANDLED: Mapping[type[Call[Any]], object] = _HANDLERS


def rpc(kind: type[_C]) -> Callable[[_Handler[_C]], _Handler[_C]]:
    """Register the decorated method of ``Methods`` as *kind*'s handler."""

    def register(handler: _Handler[_C]) -> _Handler[_C]:
        if kind in _HANDLERS:
            raise TypeError(f"{kind.method} has two handlers")
        _HANDLERS[kind] = handler
        return handler

    return register


class Methods:
    """Dispatches decoded params to the daemon's parts: one handler per
    method, each registered with ``@rpc`` for its params Struct."""

    def __init__(
        self, host: Host, sessions: SessionManager, tasks: TaskRunner, watcher: OrgWatcher
    ) -> None:
        self._host = host
        self._sessions = sessions
        self._tasks = tasks
        self._watcher = watcher

    def __repr__(self) -> str:
        return f"Methods({self._host!r})"

    async def call(self, params: Call[Any], notify: Notify) -> object:
        return await _HANDLERS[type(params)](self, params, notify)

    @rpc(DaemonStatus)
    async def _status(self, params: DaemonStatus, notify: Notify) -> StatusResult:
        # An edit saved before the call shows, as it does to session.open.
        await self._watcher.refresh()
        source = self._watcher.source
        return StatusResult(
            version=__version__,
            pid=os.getpid(),
            sessions=len(self._sessions),
            tasks_running=self._tasks.running,
            config_error=source.error,
            config_loaded_at=source.loaded_at,
            config_generation=source.generation,
            over_budget=self._watcher.over_budget,
            engines=tuple(self._host.engine_status()),
            warming=self._sessions.warm_up.pending,
        )

    @rpc(SessionOpen)
    async def _session_open(self, params: SessionOpen, notify: Notify) -> SessionOpened:
        await self._watcher.refresh(params.worker, params.channel)
        session = await self._sessions.open(params.worker, params.channel)
        return SessionOpened(
            session=session.id,
            worker=session.worker,
            channel=session.channel,
            turns=session.progress.turns,
            system_chars=len(session.system.text),
            route_key=session.system.route_key,
        )

    @rpc(SessionSend)
    async def _session_send(self, params: SessionSend, notify: Notify) -> TurnResult:
        session = await self._sessions.get(params.session)
        outcome = await session.send(
            params.text,
            params.sender,
            _deltas(notify, params.session),
            _waits(notify, params.session),
        )
        return _turn_result(outcome)

    @rpc(SessionClose)
    async def _session_close(self, params: SessionClose, notify: Notify) -> Closed:
        await self._sessions.close(params.session)
        return Closed(closed=params.session)

    @rpc(RunDirect)
    async def _run_direct(self, params: RunDirect, notify: Notify) -> TurnResult:
        await self._watcher.refresh(params.worker)
        host = self._host
        run_id = host.runs.new_id("d", host.clock())
        outcome = await direct_run(
            host,
            run_id,
            params.worker,
            params.text,
            params.sender,
            _deltas(notify, run_id),
            _waits(notify, run_id),
        )
        return _turn_result(outcome)

    @rpc(TaskSubmit)
    async def _task_submit(self, params: TaskSubmit, notify: Notify) -> TaskState:
        await self._watcher.refresh(params.worker, params.channel)
        return await self._tasks.submit(params.worker, params.channel, params.text)

    @rpc(TaskGet)
    async def _task_get(self, params: TaskGet, notify: Notify) -> TaskState:
        if params.wait is None:
            return await self._host.stores.tasks.get(params.task)
        return await self._tasks.settled(params.task, params.wait)

    @rpc(TaskList)
    async def _task_list(self, params: TaskList, notify: Notify) -> list[TaskState]:
        tasks = await self._host.stores.tasks.all()
        return newest_page(tasks, "task", params.limit, params.before)

    @rpc(ChannelPost)
    async def _channel_post(self, params: ChannelPost, notify: Notify) -> ChannelMessage:
        host = self._host
        if params.channel not in host.org.channels:
            raise NotFoundError("channel", params.channel)
        (message,) = await host.stores.channels.post_many(
            params.channel, [(params.sender, params.text, host.clock())]
        )
        return message

    @rpc(MemoryAdd)
    async def _memory_add(self, params: MemoryAdd, notify: Notify) -> MemoryNote:
        self._check_scope(params.worker, params.channel)
        host = self._host
        item = await host.stores.memory.add(
            params.worker, params.text, params.channel, host.clock()
        )
        return _with_retirement(item, None)

    @rpc(MemoryList)
    async def _memory_list(self, params: MemoryList, notify: Notify) -> list[MemoryNote]:
        self._check_scope(params.worker, None)
        memory = self._host.stores.memory
        retired = await memory.retirements(params.worker)
        listed = [
            item
            for item in await memory.items(params.worker)
            if params.all or item.id not in retired
        ]
        page = newest_page(listed, "note", params.limit, params.before)
        return [_with_retirement(item, retired.get(item.id)) for item in page]

    @rpc(MemoryForget)
    async def _memory_forget(self, params: MemoryForget, notify: Notify) -> MemoryNote:
        self._check_scope(params.worker, None)
        host = self._host
        retirement = Retirement(note=params.note, because=params.because, at=host.clock())
        item = await host.stores.memory.retire(params.worker, retirement)
        return _with_retirement(item, retirement)

    @rpc(GateFile)
    async def _gate_file(self, params: GateFile, notify: Notify) -> GateState:
        self._check_scope(params.worker, params.channel)
        host = self._host
        if params.run is not None:
            info = await host.runs.info(params.run)
            if info.worker != params.worker:
                raise ConflictError(f"run {params.run!r} belongs to worker {info.worker!r}")
        gate = await host.stores.gates.file(
            params.worker, params.summary, host.clock(), params.channel, params.run
        )
        await self._tasks.gate_filed(gate)
        return gate

    @rpc(GateResolve)
    async def _gate_resolve(self, params: GateResolve, notify: Notify) -> GateState:
        host = self._host
        resolved = await host.stores.gates.resolve(
            params.gate, params.outcome, params.note, host.clock()
        )
        await self._tasks.gate_resolved(resolved)
        return resolved

    @rpc(GateList)
    async def _gate_list(self, params: GateList, notify: Notify) -> list[GateState]:
        gates = await self._host.stores.gates.all(params.worker)
        return newest_page(gates, "gate", params.limit, params.before)

    @rpc(RunsList)
    async def _runs_list(self, params: RunsList, notify: Notify) -> list[RunInfo]:
        return await self._host.runs.newest(params.limit, params.before)

    @rpc(RunsShow)
    async def _runs_show(self, params: RunsShow, notify: Notify) -> RunShown:
        host = self._host
        runs = host.runs
        if params.wait is None:
            info = await runs.info(params.run)
        else:
            # Its first look answers an unknown run (1003) at once.
            info = await settled(
                lambda: runs.info(params.run),
                lambda info: info.status != "open",
                # Ended here by a turn or on another host: seen by looking again.
                host.leases.recovered,
                params.wait,
                again_s=host.look_again_s,
                stopping=lambda: self._tasks.draining,
            )
        return RunShown(
            info=info,
            records=await runs.context(params.run),
            transcript=await runs.transcript(params.run),
        )

    @rpc(RunsContext)
    async def _runs_context(self, params: RunsContext, notify: Notify) -> ContextPage:
        if not params.all and (params.after is not None or params.limit is not None):
            raise ProtocolError(
                "invalid params: `after` and `limit` page `all: true` only", code=INVALID_PARAMS
            )
        runs = self._host.runs
        await runs.info(params.run)
        entries = await runs.transcript(params.run)
        # A request needs of the trace only the compiled system part it
        # starts with, near its head: a long session's trace is read no
        # further. A run that sent nothing is answered from its whole
        # trace, which says what failed.
        if any(entry.role == "user" for entry in entries):
            records = await runs.context_until(params.run, compiled_system)
        else:
            records = await runs.context(params.run)
        return context_page(
            params.run,
            records,
            entries,
            every=params.all,
            after=params.after or 0,
            limit=params.limit or CONTEXT_PAGE_TURNS,
        )

    def _check_scope(self, worker: str, channel: str | None) -> None:
        org = self._host.org
        if channel is None:
            org.scope(Surface.DIRECT, worker, None)
        else:
            org.scope(Surface.SESSION, worker, channel)


def _with_retirement(item: MemoryItem, retired: Retirement | None) -> MemoryNote:
    return MemoryNote(**msgspec.structs.asdict(item), retired=retired)


def _turn_result(outcome: TurnOutcome) -> TurnResult:
    record = outcome.record
    budget = record.budget
    return TurnResult(
        run=outcome.run,
        turn=outcome.turn,
        text=outcome.reply.text,
        usage=outcome.reply.usage,
        blocks=[
            BlockSummary(b.block, b.status, b.rendered_chars, b.items, b.omitted)
            for b in record.blocks
        ],
        used=budget.used if budget else 0,
        total=budget.total if budget else 0,
        rolled_from=outcome.rolled_from,
        steps=outcome.steps,
    )


def _deltas(notify: Notify, run: str) -> Callable[[str], Awaitable[None]]:
    async def on_delta(text: str) -> None:
        await notify("turn.delta", Delta(run=run, text=text))

    return on_delta


def _waits(notify: Notify, run: str) -> WaitSink:
    async def on_wait(reason: WaitReason, retry_in_s: float | None) -> None:
        seconds = None if retry_in_s is None else round(retry_in_s, 3)
        await notify("turn.wait", Wait(run=run, reason=reason, retry_in_s=seconds))

    return on_wait
