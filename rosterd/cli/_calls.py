"""The client commands: one RPC call each, printed for people or as JSON.

``run``, ``task``, ``memory``, ``gate``, ``channel`` and ``status``. Each is
a row of ``COMMANDS``: the typed client call its arguments make, and how
the reply reads for people. Every one connects to the daemon's socket,
makes its call and exits; errors from the daemon become one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from ..client import OnDelta, RosterClient
from ..compiler import ChannelMessage, Retirement
from ..protocol import (
    GateState,
    MemoryNote,
    StatusResult,
    TaskState,
    TurnResult,
    describe_over_budget,
)
from ._chat import stream_deltas
from ._output import Columns, emit_json, listing, read_text, short, when
from ._views import summary_line

_T = TypeVar("_T")
_Args = argparse.Namespace


@dataclass(frozen=True)
class _Call(Generic[_T]):
    call: Callable[[RosterClient, _Args], Awaitable[_T]]
    show: Callable[[_T, _Args, Path], None]

    async def __call__(self, args: _Args, socket: Path) -> int:
        async with await RosterClient.connect(socket) as client:
            result = await self.call(client, args)
        if args.json:
            emit_json(result)
        else:
            self.show(result, args, socket)
        return 0


def _deltas(args: _Args) -> OnDelta | None:
    """Streamed deltas are the reply as people read it; --json wants one object."""
    return None if args.json else stream_deltas


def _where(channel: str | None) -> str:
    return f"#{channel}" if channel else "all channels"


def _show_run(turn: TurnResult, args: _Args, socket: Path) -> None:
    print()
    print(summary_line(turn), file=sys.stderr)


def _show_submitted(task: TaskState, args: _Args, socket: Path) -> None:
    print(f"{task.id} {task.status}: {task.worker} in #{task.channel}")


def _show_task(task: TaskState, args: _Args, socket: Path) -> None:
    print(f"{task.id}  {task.status}")
    print(f"worker {task.worker} · channel #{task.channel}")
    print(f"submitted {when(task.submitted_at)} · updated {when(task.updated_at)}")
    print(f"runs {' '.join(task.runs) or '-'}")
    if task.continuation is not None:
        c = task.continuation
        print(f"continues after gate {c.gate}: {short(c.summary)} -> {short(c.outcome)}")
    print(f"text: {task.text}")
    if task.reply is not None:
        print(f"reply: {task.reply}")
    if task.error is not None:
        print(f"error: {task.error}")


_TASKS: Columns[TaskState] = (
    ("TASK", lambda t: t.id),
    ("STATUS", lambda t: t.status),
    ("WORKER", lambda t: t.worker),
    ("CHANNEL", lambda t: f"#{t.channel}"),
    ("SUBMITTED", lambda t: when(t.submitted_at)),
    ("RUNS", lambda t: len(t.runs)),
    ("TEXT", lambda t: short(t.text)),
)


def _show_tasks(tasks: list[TaskState], args: _Args, socket: Path) -> None:
    print(listing(_TASKS, tasks, "no tasks"))


def _show_memory_added(item: MemoryNote, args: _Args, socket: Path) -> None:
    print(f"memory {item.id} added for {args.worker} ({_where(item.channel)})")


_NOTES: Columns[MemoryNote] = (
    ("ID", lambda m: m.id),
    ("SCOPE", lambda m: f"#{m.channel}" if m.channel else "*"),
    ("AUTHOR", lambda m: _author(m.author, m.run, m.turn)),
    ("CREATED", lambda m: when(m.created_at)),
    ("TEXT", lambda m: short(m.text, 60)),
)
# With --all, the retired notes too, and how each was retired.
_EVERY_NOTE: Columns[MemoryNote] = (*_NOTES, ("RETIRED", lambda m: _retired(m.retired)))


def _show_memory(notes: list[MemoryNote], args: _Args, socket: Path) -> None:
    print(listing(_EVERY_NOTE if args.all else _NOTES, notes, f"no memory for {args.worker}"))


def _show_forgotten(note: MemoryNote, args: _Args, socket: Path) -> None:
    print(f"memory {note.id} retired for {args.worker}: it never ranks again")


def _author(author: str, run: str | None, turn: int | None) -> str:
    return author if run is None else f"{author} in {run} turn {turn}"


def _retired(retired: Retirement | None) -> str:
    if retired is None:
        return "-"
    by = _author(retired.author, retired.run, retired.turn)
    return f"retired {when(retired.at)} by {by}: {short(retired.because, 40)}"


def _show_filed(gate: GateState, args: _Args, socket: Path) -> None:
    where = [_where(gate.channel), *([f"run {gate.run}"] if gate.run else [])]
    print(f"gate {gate.id} filed for {gate.worker} ({', '.join(where)})")


def _show_resolved(gate: GateState, args: _Args, socket: Path) -> None:
    print(f"gate {gate.id} resolved: {gate.outcome}")


_GATES: Columns[GateState] = (
    ("GATE", lambda g: g.id),
    ("STATUS", lambda g: g.status),
    ("WORKER", lambda g: g.worker),
    ("CHANNEL", lambda g: f"#{g.channel}" if g.channel else "*"),
    ("RUN", lambda g: g.run),
    ("FILED", lambda g: when(g.filed_at)),
    ("SUMMARY", lambda g: short(g.summary, 40)),
    ("OUTCOME", lambda g: short(g.outcome, 30)),
)


def _show_gates(gates: list[GateState], args: _Args, socket: Path) -> None:
    print(listing(_GATES, gates, "no gates"))


def _show_posted(message: ChannelMessage, args: _Args, socket: Path) -> None:
    print(f"posted message {message.seq} to #{args.channel} as {message.sender}")


def _show_status(info: StatusResult, args: _Args, socket: Path) -> None:
    print(f"rosterd {info.version} · pid {info.pid} · socket {socket}")
    print(f"sessions {info.sessions} warm · tasks {info.tasks_running} running")
    print(f"config generation {info.config_generation}, loaded {when(info.config_loaded_at)}")
    if info.config_error is not None:
        print(f"config error (last good configuration in force): {info.config_error}")
    for problem in info.over_budget:
        print(f"over budget (its runs fail): {describe_over_budget(problem)}")
    if info.warming:
        print(f"warming up (indexing their notes): {', '.join(info.warming)}")
    for engine in info.engines:
        breaker = f"breaker {engine.breaker}"
        if engine.retry_in_s is not None:
            breaker += f", retry in {engine.retry_in_s:.0f}s"
        print(
            f"engine {engine.name} ({engine.kind}): {breaker} · {engine.inflight} in flight · "
            f"{engine.queued} queued · {engine.failures} failed in a row"
        )


COMMANDS: dict[str, Callable[[_Args, Path], Awaitable[int]]] = {
    "run": _Call(
        lambda c, a: c.run_direct(a.worker, read_text(a.text, "message"), a.sender, _deltas(a)),
        _show_run,
    ),
    "task submit": _Call(
        lambda c, a: c.task_submit(a.worker, a.channel, read_text(a.text, "task")),
        _show_submitted,
    ),
    "task get": _Call(lambda c, a: c.task_get(a.task, a.wait), _show_task),
    "task list": _Call(lambda c, a: c.task_list(a.limit), _show_tasks),
    "memory add": _Call(
        lambda c, a: c.memory_add(a.worker, read_text(a.text, "memory text"), a.channel),
        _show_memory_added,
    ),
    "memory list": _Call(lambda c, a: c.memory_list(a.worker, a.all, a.limit), _show_memory),
    "memory forget": _Call(
        lambda c, a: c.memory_forget(a.worker, a.note, a.because), _show_forgotten
    ),
    "gate file": _Call(
        lambda c, a: c.gate_file(a.worker, read_text(a.summary, "gate summary"), a.channel, a.run),
        _show_filed,
    ),
    "gate resolve": _Call(lambda c, a: c.gate_resolve(a.gate, a.outcome, a.note), _show_resolved),
    "gate list": _Call(lambda c, a: c.gate_list(a.worker, a.limit), _show_gates),
    "channel post": _Call(
        lambda c, a: c.channel_post(a.channel, a.sender, read_text(a.text, "message")),
        _show_posted,
    ),
    "status": _Call(lambda c, a: c.daemon_status(), _show_status),
}
