"""The client commands: one RPC call each, printed for people or as JSON.

``run``, ``task``, ``memory``, ``gate``, ``channel`` and ``status``. Each is
a row of ``COMMANDS``: the method, its params from the arguments, the reply's
type and how it reads for people. Every one connects to the daemon's socket,
makes its call and exits; errors from the daemon become one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..client import RosterClient
from ..compiler import ChannelMessage, MemoryItem
from ..daemon import StatusResult, TurnResult, describe_over_budget
from ..stores import GateState, TaskState
from ._chat import stream_deltas
from ._output import convert, emit_json, read_text, short, table, when
from ._views import summary_line

__all__ = ("COMMANDS",)


_T = TypeVar("_T")
_Args = argparse.Namespace


@dataclass(frozen=True)
class _Call(Generic[_T]):
    method: str
    params: Callable[[_Args], dict[str, Any]]
    reply: type[_T]
    show: Callable[[_T, _Args, Path], None]
    # Streamed deltas are the reply as people read it; --json wants one object.
    stream: bool = False

    async def __call__(self, args: _Args, socket: Path) -> int:
        stream = self.stream and not args.json
        async with await RosterClient.connect(socket) as client:
            result = await client.call(
                self.method, self.params(args), stream_deltas if stream else None
            )
        if args.json:
            emit_json(result)
        else:
            self.show(convert(result, self.reply, f"{self.method} reply"), args, socket)
        return 0


def _optional(**params: object) -> dict[str, Any]:
    """Params without the options the user left out."""
    return {name: value for name, value in params.items() if value is not None}


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


def _show_tasks(tasks: list[TaskState], args: _Args, socket: Path) -> None:
    if not tasks:
        print("no tasks")
        return
    rows = [
        (
            t.id,
            t.status,
            t.worker,
            f"#{t.channel}",
            when(t.submitted_at),
            len(t.runs),
            short(t.text),
        )
        for t in tasks
    ]
    print(table(("TASK", "STATUS", "WORKER", "CHANNEL", "SUBMITTED", "RUNS", "TEXT"), rows))


def _show_memory_added(item: MemoryItem, args: _Args, socket: Path) -> None:
    print(f"memory {item.id} added for {args.worker} ({_where(item.channel)})")


def _show_memory(items: list[MemoryItem], args: _Args, socket: Path) -> None:
    if not items:
        print(f"no memory for {args.worker}")
        return
    rows = [
        (m.id, f"#{m.channel}" if m.channel else "*", when(m.created_at), short(m.text, 70))
        for m in items
    ]
    print(table(("ID", "CHANNEL", "CREATED", "TEXT"), rows))


def _show_filed(gate: GateState, args: _Args, socket: Path) -> None:
    where = [_where(gate.channel), *([f"run {gate.run}"] if gate.run else [])]
    print(f"gate {gate.id} filed for {gate.worker} ({', '.join(where)})")


def _show_resolved(gate: GateState, args: _Args, socket: Path) -> None:
    print(f"gate {gate.id} resolved: {gate.outcome}")


def _show_gates(gates: list[GateState], args: _Args, socket: Path) -> None:
    if not gates:
        print("no gates")
        return
    rows = [
        (
            g.id,
            g.status,
            g.worker,
            f"#{g.channel}" if g.channel else "*",
            g.run,
            when(g.filed_at),
            short(g.summary, 40),
            short(g.outcome, 30),
        )
        for g in gates
    ]
    headers = ("GATE", "STATUS", "WORKER", "CHANNEL", "RUN", "FILED", "SUMMARY", "OUTCOME")
    print(table(headers, rows))


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


COMMANDS: dict[str, Callable[[_Args, Path], Awaitable[int]]] = {
    "run": _Call(
        "run.direct",
        lambda a: {"worker": a.worker, "text": read_text(a.text, "message"), "from": a.sender},
        TurnResult,
        _show_run,
        stream=True,
    ),
    "task submit": _Call(
        "task.submit",
        lambda a: {"worker": a.worker, "channel": a.channel, "text": read_text(a.text, "task")},
        TaskState,
        _show_submitted,
    ),
    "task get": _Call("task.get", lambda a: {"task": a.task}, TaskState, _show_task),
    "task list": _Call("task.list", lambda a: {}, list[TaskState], _show_tasks),
    "memory add": _Call(
        "memory.add",
        lambda a: _optional(
            worker=a.worker, channel=a.channel, text=read_text(a.text, "memory text")
        ),
        MemoryItem,
        _show_memory_added,
    ),
    "memory list": _Call(
        "memory.list", lambda a: {"worker": a.worker}, list[MemoryItem], _show_memory
    ),
    "gate file": _Call(
        "gate.file",
        lambda a: _optional(
            worker=a.worker,
            channel=a.channel,
            run=a.run,
            summary=read_text(a.summary, "gate summary"),
        ),
        GateState,
        _show_filed,
    ),
    "gate resolve": _Call(
        "gate.resolve",
        lambda a: {"gate": a.gate, "outcome": a.outcome, "note": a.note},
        GateState,
        _show_resolved,
    ),
    "gate list": _Call(
        "gate.list", lambda a: _optional(worker=a.worker), list[GateState], _show_gates
    ),
    "channel post": _Call(
        "channel.post",
        lambda a: {"channel": a.channel, "from": a.sender, "text": read_text(a.text, "message")},
        ChannelMessage,
        _show_posted,
    ),
    "status": _Call("daemon.status", lambda a: {}, StatusResult, _show_status),
}
