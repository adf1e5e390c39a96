"""The client commands: one RPC call each, printed for people or as JSON.

``run``, ``task``, ``memory``, ``gate``, ``channel`` and ``status``. Every
one connects to the daemon's socket, makes its call and exits; errors from
the daemon become one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..client import RosterClient
from ..compiler import ChannelMessage, MemoryItem
from ..daemon import StatusResult, TurnResult, describe_over_budget
from ..stores import GateState, TaskState
from ._chat import stream_deltas
from ._output import convert, emit_json, read_text, short, table, when
from ._views import summary_line

__all__ = ("COMMANDS",)


async def _call(socket: Path, method: str, params: dict[str, Any], *, stream: bool = False) -> Any:
    async with await RosterClient.connect(socket) as client:
        return await client.call(method, params, stream_deltas if stream else None)


def _optional(**params: object) -> dict[str, Any]:
    """Params without the options the user left out."""
    return {name: value for name, value in params.items() if value is not None}


async def run(args: argparse.Namespace, socket: Path) -> int:
    text = read_text(args.text, "message")
    params = {"worker": args.worker, "text": text, "from": args.sender}
    result = await _call(socket, "run.direct", params, stream=not args.json)
    if args.json:
        emit_json(result)
        return 0
    turn = convert(result, TurnResult, "run.direct reply")
    print()
    print(summary_line(turn), file=sys.stderr)
    return 0


async def task_submit(args: argparse.Namespace, socket: Path) -> int:
    text = read_text(args.text, "task")
    params = {"worker": args.worker, "channel": args.channel, "text": text}
    result = await _call(socket, "task.submit", params)
    if args.json:
        emit_json(result)
        return 0
    task = convert(result, TaskState, "task.submit reply")
    print(f"{task.id} {task.status}: {task.worker} in #{task.channel}")
    return 0


async def task_get(args: argparse.Namespace, socket: Path) -> int:
    result = await _call(socket, "task.get", {"task": args.task})
    if args.json:
        emit_json(result)
        return 0
    task = convert(result, TaskState, "task.get reply")
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
    return 0


async def task_list(args: argparse.Namespace, socket: Path) -> int:
    result = await _call(socket, "task.list", {})
    if args.json:
        emit_json(result)
        return 0
    tasks = convert(result, list[TaskState], "task.list reply")
    if not tasks:
        print("no tasks")
        return 0
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
    return 0


async def memory_add(args: argparse.Namespace, socket: Path) -> int:
    text = read_text(args.text, "memory text")
    params = _optional(worker=args.worker, channel=args.channel, text=text)
    result = await _call(socket, "memory.add", params)
    if args.json:
        emit_json(result)
        return 0
    item = convert(result, MemoryItem, "memory.add reply")
    scope = f"#{item.channel}" if item.channel else "all channels"
    print(f"memory {item.id} added for {args.worker} ({scope})")
    return 0


async def memory_list(args: argparse.Namespace, socket: Path) -> int:
    result = await _call(socket, "memory.list", {"worker": args.worker})
    if args.json:
        emit_json(result)
        return 0
    items = convert(result, list[MemoryItem], "memory.list reply")
    if not items:
        print(f"no memory for {args.worker}")
        return 0
    rows = [
        (m.id, f"#{m.channel}" if m.channel else "*", when(m.created_at), short(m.text, 70))
        for m in items
    ]
    print(table(("ID", "CHANNEL", "CREATED", "TEXT"), rows))
    return 0


async def gate_file(args: argparse.Namespace, socket: Path) -> int:
    summary = read_text(args.summary, "gate summary")
    params = _optional(worker=args.worker, channel=args.channel, run=args.run, summary=summary)
    result = await _call(socket, "gate.file", params)
    if args.json:
        emit_json(result)
        return 0
    gate = convert(result, GateState, "gate.file reply")
    where = [f"#{gate.channel}" if gate.channel else "all channels"]
    if gate.run:
        where.append(f"run {gate.run}")
    print(f"gate {gate.id} filed for {gate.worker} ({', '.join(where)})")
    return 0


async def gate_resolve(args: argparse.Namespace, socket: Path) -> int:
    params = {"gate": args.gate, "outcome": args.outcome, "note": args.note}
    result = await _call(socket, "gate.resolve", params)
    if args.json:
        emit_json(result)
        return 0
    gate = convert(result, GateState, "gate.resolve reply")
    print(f"gate {gate.id} resolved: {gate.outcome}")
    return 0


async def gate_list(args: argparse.Namespace, socket: Path) -> int:
    result = await _call(socket, "gate.list", _optional(worker=args.worker))
    if args.json:
        emit_json(result)
        return 0
    gates = convert(result, list[GateState], "gate.list reply")
    if not gates:
        print("no gates")
        return 0
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
    return 0


async def channel_post(args: argparse.Namespace, socket: Path) -> int:
    text = read_text(args.text, "message")
    params = {"channel": args.channel, "from": args.sender, "text": text}
    result = await _call(socket, "channel.post", params)
    if args.json:
        emit_json(result)
        return 0
    message = convert(result, ChannelMessage, "channel.post reply")
    print(f"posted message {message.seq} to #{args.channel} as {message.sender}")
    return 0


async def status(args: argparse.Namespace, socket: Path) -> int:
    result = await _call(socket, "daemon.status", {})
    if args.json:
        emit_json(result)
        return 0
    info = convert(result, StatusResult, "daemon.status reply")
    print(f"rosterd {info.version} · pid {info.pid} · socket {socket}")
    print(f"sessions {info.sessions} warm · tasks {info.tasks_running} running")
    print(f"config generation {info.config_generation}, loaded {when(info.config_loaded_at)}")
    if info.config_error is not None:
        print(f"config error (last good configuration in force): {info.config_error}")
    for problem in info.over_budget:
        print(f"over budget (its runs fail): {describe_over_budget(problem)}")
    return 0


COMMANDS = {
    "run": run,
    "task submit": task_submit,
    "task get": task_get,
    "task list": task_list,
    "memory add": memory_add,
    "memory list": memory_list,
    "gate file": gate_file,
    "gate resolve": gate_resolve,
    "gate list": gate_list,
    "channel post": channel_post,
    "status": status,
}
