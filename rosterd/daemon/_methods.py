"""What each RPC method does: a thin shell over sessions, tasks and stores."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import msgspec

from .. import __version__
from .._errors import ConflictError, NotFoundError, ProtocolError
from ..compiler import MemoryItem, Retirement
from ..engines import WaitSink
from ..org import Surface
from ..protocol import (
    INVALID_PARAMS,
    BlockSummary,
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
    Params,
    RunDirect,
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
    TaskSubmit,
    TurnResult,
    Wait,
    WaitReason,
)
from ..sessions import (
    CONTEXT_PAGE_TURNS,
    Host,
    SessionManager,
    TaskRunner,
    TurnOutcome,
    context_page,
    direct_run,
)
from ._watch import OrgWatcher

__all__ = ("Methods", "Notify")

Notify = Callable[[str, object], Awaitable[None]]


class Methods:
    """Dispatches decoded params to the daemon's parts."""

    def __init__(
        self, host: Host, sessions: SessionManager, tasks: TaskRunner, watcher: OrgWatcher
    ) -> None:
        self._host = host
        self._sessions = sessions
        self._tasks = tasks
        self._watcher = watcher

    def __repr__(self) -> str:
        return f"Methods({self._host!r})"

    async def call(self, params: Params, notify: Notify) -> object:
        host = self._host
        match params:
            case DaemonStatus():
                return StatusResult(
                    version=__version__,
                    pid=os.getpid(),
                    sessions=len(self._sessions),
                    tasks_running=self._tasks.running,
                    config_error=self._watcher.source.error,
                    config_loaded_at=self._watcher.source.loaded_at,
                    config_generation=self._watcher.source.generation,
                    over_budget=self._watcher.over_budget,
                    engines=tuple(host.engine_status()),
                )
            case SessionOpen(worker=worker, channel=channel):
                await self._watcher.refresh()
                session = await self._sessions.open(worker, channel)
                return SessionOpened(
                    session=session.id,
                    worker=session.worker,
                    channel=session.channel,
                    turns=session.turns,
                    system_chars=len(session.system.text),
                    route_key=session.system.route_key,
                )
            case SessionSend(session=session_id, text=text, sender=sender):
                session = await self._sessions.get(session_id)
                outcome = await session.send(
                    text, sender, _deltas(notify, session_id), _waits(notify, session_id)
                )
                return _turn_result(outcome)
            case SessionClose(session=session_id):
                await self._sessions.close(session_id)
                return Closed(closed=session_id)
            case RunDirect(worker=worker, text=text, sender=sender):
                await self._watcher.refresh()
                run_id = host.runs.new_id("d", host.clock())
                outcome = await direct_run(
                    host,
                    run_id,
                    worker,
                    text,
                    sender,
                    _deltas(notify, run_id),
                    _waits(notify, run_id),
                )
                return _turn_result(outcome)
            case TaskSubmit(worker=worker, channel=channel, text=text):
                await self._watcher.refresh()
                return await self._tasks.submit(worker, channel, text)
            case TaskGet(task=task_id):
                return await host.stores.tasks.get(task_id)
            case TaskList():
                return await host.stores.tasks.all()
            case ChannelPost(channel=channel, sender=sender, text=text):
                self._known_channel(channel)
                (message,) = await host.stores.channels.post_many(
                    channel, [(sender, text, host.clock())]
                )
                return message
            case MemoryAdd(worker=worker, text=text, channel=channel):
                self._check_scope(worker, channel)
                item = await host.stores.memory.add(worker, text, channel, host.clock())
                return _with_retirement(item, None)
            case MemoryList(worker=worker, all=every):
                self._check_scope(worker, None)
                return await self._notes(worker, every)
            case MemoryForget(worker=worker, note=note, because=because):
                self._check_scope(worker, None)
                retirement = Retirement(note=note, because=because, at=host.clock())
                item = await host.stores.memory.retire(worker, retirement)
                return _with_retirement(item, retirement)
            case GateFile(worker=worker, summary=summary, channel=channel, run=run):
                self._check_scope(worker, channel)
                if run is not None:
                    info = await host.runs.info(run)
                    if info.worker != worker:
                        raise ConflictError(f"run {run!r} belongs to worker {info.worker!r}")
                gate = await host.stores.gates.file(worker, summary, host.clock(), channel, run)
                await self._tasks.gate_filed(gate)
                return gate
            case GateResolve(gate=gate_id, outcome=outcome, note=note):
                resolved: GateState = await host.stores.gates.resolve(
                    gate_id, outcome, note, host.clock()
                )
                await self._tasks.gate_resolved(resolved)
                return resolved
            case GateList(worker=worker):
                return await host.stores.gates.all(worker)
            case RunsList():
                return await host.runs.all()
            case RunsShow(run=run):
                return RunShown(
                    info=await host.runs.info(run),
                    records=await host.runs.context(run),
                    transcript=await host.runs.transcript(run),
                )
            case RunsContext():
                return await self._context(params)
        raise AssertionError(f"unhandled params {params!r}")

    async def _context(self, params: RunsContext) -> ContextPage:
        if not params.all and (params.after is not None or params.limit is not None):
            raise ProtocolError(
                "invalid params: `after` and `limit` page `all: true` only", code=INVALID_PARAMS
            )
        runs = self._host.runs
        await runs.info(params.run)
        return context_page(
            params.run,
            await runs.context(params.run),
            await runs.transcript(params.run),
            every=params.all,
            after=params.after or 0,
            limit=params.limit or CONTEXT_PAGE_TURNS,
        )

    async def _notes(self, worker: str, every: bool) -> list[MemoryNote]:
        memory = self._host.stores.memory
        retired = await memory.retirements(worker)
        return [
            _with_retirement(item, retired.get(item.id))
            for item in await memory.items(worker)
            if every or item.id not in retired
        ]

    def _known_channel(self, channel: str) -> None:
        if channel not in self._host.org.channels:
            raise NotFoundError("channel", channel)

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
