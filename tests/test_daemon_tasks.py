"""Queued tasks, direct runs, and gates that pause and continue a task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from harness import (
    DaemonProcess,
    InProcessDaemon,
    daemon_in_process,
    set_daemon,
    set_engine,
    wait_task,
)
from simulator import Simulator, Stall

from rosterd.client import RpcError
from rosterd.protocol import Call, Delta, RunsShow, TaskGet, TaskSubmit


def run_lines(state: Path, run: str) -> list[dict[str, Any]]:
    (record,) = [
        msgspec.json.decode(line)
        for line in (state / "runs" / run / "context.jsonl").read_bytes().splitlines()
    ]
    input_blocks = [
        b for b in record["blocks"] if b["block"] in {"memory", "briefing", "history", "task"}
    ]
    return [msgspec.json.decode(line) for b in input_blocks for line in b["content"].splitlines()]


@pytest.mark.anyio
async def test_a_task_runs_to_done_with_a_reply(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        task = await client.task_submit("ada", "releases", "draft notes")
        assert task.status == "queued"
        done = await wait_task(client, task.id, "done")
    assert "You said: draft notes" in (done.reply or "")
    (run,) = done.runs
    lines = run_lines(served.state, run)
    assert lines[-1]["block"] == "task"
    assert lines[-1]["run"] == run


@pytest.mark.anyio
async def test_text_cannot_choose_the_channel(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        task = await client.task_submit("ada", "releases", "use channel general")
        done = await wait_task(client, task.id, "done")
    record = msgspec.json.decode(
        (served.state / "runs" / done.runs[0] / "context.jsonl").read_bytes()
    )
    assert record["channel"] == "releases"
    purpose = next(b for b in record["blocks"] if b["block"] == "purpose")
    assert purpose["source"] == "channels/releases/purpose.md"


@pytest.mark.anyio
@pytest.mark.parametrize("count", [1, 2])
async def test_resolving_the_gates_of_a_paused_task_queues_one_continuation_showing_each(
    served: InProcessDaemon, count: int
) -> None:
    async with await served.client() as client:
        task = await client.task_submit("ada", "releases", "tag 1.4")
        done = await wait_task(client, task.id, "done")
        run = done.runs[0]
        gates = [
            await client.gate_file("ada", f"sign-off {n} for 1.4?", channel="releases", run=run)
            for n in range(count)
        ]
        # The task waits for every gate filed against its run.
        statuses = []
        for gate in gates:
            statuses.append((await client.task_get(task.id)).status)
            await client.gate_resolve(gate.id, "approved", note=f"go {gate.id}")
        finished = await wait_task(client, task.id, "done")
    assert statuses == ["paused"] * count
    assert len(finished.runs) == 2
    briefing = [x for x in run_lines(served.state, finished.runs[1]) if x["block"] == "briefing"]
    *others, last = gates
    assert briefing == [
        {"block": "briefing", "kind": kind, "gate": g.id, "summary": g.summary}
        | {"outcome": "approved", "note": f"go {g.id}"}
        for kind, g in [("continuation", last), *(("resolved", g) for g in others)]
    ]


@pytest.mark.anyio
async def test_direct_runs_have_no_channel(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        deltas: list[str] = []

        async def on_delta(delta: Delta) -> None:
            deltas.append(delta.text)

        result = await client.run_direct("grace", "status?", on_delta=on_delta)
    assert "".join(deltas) == result.text
    record = msgspec.json.decode(
        (served.state / "runs" / result.run / "context.jsonl").read_bytes()
    )
    assert record["surface"] == "direct"
    assert record["channel"] is None
    assert next(b for b in record["blocks"] if b["block"] == "purpose")["status"] == "absent"


@pytest.mark.anyio
async def test_gate_and_memory_refuse_unknown_scopes(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        with pytest.raises(RpcError) as gate:
            await client.gate_file("ada", "?", channel="nope")
        with pytest.raises(RpcError) as resolve:
            await client.gate_resolve("g-99", "no")
        with pytest.raises(RpcError) as memory:
            await client.memory_add("zed", "x")
        with pytest.raises(RpcError) as task:
            await client.task_get("task-42")
    assert gate.value.data == {"kind": "channel", "name": "nope"}
    assert resolve.value.data == {"kind": "gate", "name": "g-99"}
    assert memory.value.data == {"kind": "worker", "name": "zed"}
    assert task.value.code == 1003


@pytest.mark.anyio
async def test_queued_tasks_survive_a_restart(org_dir: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    task = {
        "id": "task-1",
        "worker": "ada",
        "channel": "general",
        "text": "left over",
        "submitted_at": 1.0,
        "status": "running",
    }
    (state / "tasks.jsonl").write_bytes(msgspec.json.encode(task) + b"\n" + b'{"id":"task-2","wor')
    with DaemonProcess(org_dir, state).start() as process:
        async with await process.client() as client:
            done = await wait_task(client, "task-1", "done")
            listed = await client.task_list()
    assert "You said: left over" in (done.reply or "")
    assert [t.id for t in listed] == ["task-1"]
    assert "dropped a torn last line" in process.log()


@pytest.mark.anyio
async def test_task_get_with_wait_answers_once_the_task_is_done(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        task = await client.request(TaskSubmit("ada", "general", "ship it"))
        done = await client.request(TaskGet(task.id, wait=30))
    assert task.status == "queued"
    assert done.status == "done"
    assert done.reply is not None and done.reply.endswith("You said: ship it")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        (TaskGet("task-9", wait=30), 1003, "task-9"),
        (TaskGet("../task-1", wait=30), -32602, "task"),
        (TaskGet("task-1", wait=-1), -32602, "wait"),
        (TaskGet("task-1", wait=601), -32602, "wait"),
        (RunsShow("s-nope", wait=30), 1003, "s-nope"),
        (RunsShow("../s-1", wait=30), -32602, "run"),
        (RunsShow("s-1", wait=-1), -32602, "wait"),
        (RunsShow("s-1", wait=601), -32602, "wait"),
    ],
)
async def test_a_call_that_waits_refuses_bad_input_at_once(
    served: InProcessDaemon, params: Call[object], code: int, message: str
) -> None:
    async with await served.client() as client:
        await client.request(TaskSubmit("ada", "general", "ship it"))
        with anyio.fail_after(5), pytest.raises(RpcError) as failure:  # not after the wait
            await client.request(params)
    assert failure.value.code == code
    assert message in failure.value.message


@pytest.mark.anyio
async def test_a_wait_for_a_task_that_does_not_settle_ends_with_its_time(
    org_dir: Path, tmp_path: Path, simulator: Simulator
) -> None:
    set_engine(org_dir, f'kind = "openai"\nmodel = "sim-1"\nbase_url = "{simulator.openai_url}"')
    set_daemon(org_dir, "drain_s = 1")
    simulator.script(Stall())
    async with (
        daemon_in_process(org_dir, tmp_path / "state") as daemon,
        await daemon.client() as client,
    ):
        task = await client.request(TaskSubmit("ada", "general", "never answered"))
        await simulator.wait_for_requests(1)
        with anyio.fail_after(10):
            running = await client.request(TaskGet(task.id, wait=0.2))
    assert running.status == "running"
