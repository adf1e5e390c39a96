"""Writes racing on many connections: every acknowledged one is kept, under its own id,
on each state backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import anyio
import pytest
from harness import DaemonProcess

from rosterd.client import RpcError
from rosterd.protocol import (
    Call,
    ChannelPost,
    GateFile,
    GateResolve,
    MemoryAdd,
    TaskGet,
    TaskSubmit,
)

T = TypeVar("T")

CLIENTS = 20


@pytest.fixture(params=["files", "postgres"])
def daemon(
    request: pytest.FixtureRequest, org_dir: Path, tmp_path: Path
) -> Iterator[DaemonProcess]:
    """A running daemon on a copy of the example org, its state on each backend."""
    database = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    process = DaemonProcess(org_dir, tmp_path / "state", database=database).start()
    yield process
    process.stop()


async def race(daemon: DaemonProcess, params: Callable[[int], Call[T]]) -> list[T | RpcError]:
    """Call with ``params(n)`` on connection *n* of CLIENTS, all at the same moment:
    each one's result, or the error it got."""
    clients = [await daemon.client() for _ in range(CLIENTS)]
    results: dict[int, T | RpcError] = {}

    async def one(n: int) -> None:
        try:
            result = await clients[n].request(params(n))
        except RpcError as exc:
            results[n] = exc
        else:
            results[n] = result

    try:
        async with anyio.create_task_group() as tg:
            for n in range(CLIENTS):
                tg.start_soon(one, n)
    finally:
        for client in clients:
            await client.aclose()
    return [results[n] for n in range(CLIENTS)]


def succeeded(results: list[T | RpcError]) -> list[T]:
    """The results of a race whose every call must have succeeded."""
    ok = [r for r in results if not isinstance(r, RpcError)]
    assert len(ok) == len(results), [r for r in results if isinstance(r, RpcError)]
    return ok


@pytest.mark.anyio
async def test_racing_gates_each_get_their_own_id_and_survive_a_restart(
    daemon: DaemonProcess,
) -> None:
    gates = succeeded(await race(daemon, lambda n: GateFile("ada", f"gate {n}")))
    daemon.restart()
    async with await daemon.client() as client:
        listed = await client.gate_list()
    assert len({g.id for g in gates}) == CLIENTS
    assert {g.id: g.summary for g in listed} == {g.id: g.summary for g in gates}


@pytest.mark.anyio
async def test_racing_tasks_of_one_channel_each_get_their_own_id_and_all_run(
    daemon: DaemonProcess,
) -> None:
    # Four task workers run tasks of one (worker, channel) at once, which also
    # races their writes of the same state document.
    submitted = succeeded(await race(daemon, lambda n: TaskSubmit("ada", "general", f"{n}")))
    async with await daemon.client() as client:
        # Each answers once done.
        states = [await client.request(TaskGet(t.id, wait=30)) for t in submitted]
    assert [s.status for s in states] == ["done"] * CLIENTS
    assert len({t.id for t in submitted}) == CLIENTS
    assert sorted(s.text for s in states) == sorted(str(n) for n in range(CLIENTS))
    assert "Traceback" not in daemon.log()


@pytest.mark.anyio
async def test_racing_resolves_of_one_gate_are_resolved_once(daemon: DaemonProcess) -> None:
    async with await daemon.client() as client:
        gate = await client.gate_file("ada", "ship it?")
    results = await race(daemon, lambda n: GateResolve(gate.id, f"answer {n}"))
    won = [r for r in results if not isinstance(r, RpcError)]
    daemon.restart()
    async with await daemon.client() as client:
        (stored,) = await client.gate_list()
    assert len(won) == 1
    assert all("already resolved" in str(r) for r in results if isinstance(r, RpcError))
    assert stored.outcome == won[0].outcome


@pytest.mark.anyio
async def test_racing_memory_adds_each_get_their_own_id(daemon: DaemonProcess) -> None:
    items = succeeded(await race(daemon, lambda n: MemoryAdd("ada", f"note {n}")))
    async with await daemon.client() as client:
        listed = await client.memory_list("ada")
    assert sorted(i.text for i in listed) == sorted(f"note {n}" for n in range(CLIENTS))
    assert len({i.id for i in items}) == CLIENTS


@pytest.mark.anyio
async def test_racing_channel_posts_each_get_their_own_seq(daemon: DaemonProcess) -> None:
    posts = succeeded(await race(daemon, lambda n: ChannelPost("general", "bo", f"{n}")))
    assert sorted(p.text for p in posts) == sorted(str(n) for n in range(CLIENTS))
    assert len({p.seq for p in posts}) == CLIENTS
