"""Several daemons, one PostgreSQL database, one org.

Real processes on a real server: whichever host a client reaches continues
any session byte for byte, turns of one session never interleave, a host
killed mid-turn or mid-task hands over within its lease, and each task
runs once.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import NamedTuple, TypeVar

import anyio
import anyio.to_thread
import msgspec
import psycopg
import pytest
from harness import (
    DaemonProcess,
    InProcessDaemon,
    ManualClock,
    daemon_in_process,
    in_process_client,
)
from orgs import write_org
from postgres import PostgresServer, waiting_on_locks
from psycopg.rows import TupleRow
from simulator import Delay, Held, Simulator, Stall

from rosterd.client import RosterClient, RpcError
from rosterd.compiler import BlockTrace, ContextRecord, RunMeta, compile_system, held_items
from rosterd.org import Surface, load_org
from rosterd.protocol import (
    Call,
    GateFile,
    GateList,
    GateResolve,
    MemoryAdd,
    RunDirect,
    RunsContext,
    RunsList,
    RunsShow,
    SessionClose,
    SessionOpen,
    SessionSend,
    TaskGet,
    TaskList,
    TaskSubmit,
    TurnRequest,
)
from rosterd.stores import cut_off
from rosterd.stores.postgres import PostgresState

pytestmark = pytest.mark.anyio

T = TypeVar("T")

LEASE_S = 1.0


def _org(root: Path, engine: str = 'kind = "echo"') -> Path:
    daemon = f"[daemon]\nlease_s = {LEASE_S}\ntask_workers = 2"
    return write_org(root, workers=["ada"], channels=4, engine=engine, sections=daemon)


@pytest.fixture
def hosts(tmp_path: Path, postgres_url: str) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    """Two daemons on one database, each with its own socket and log."""
    with _started(_org(tmp_path / "org"), tmp_path, postgres_url) as started:
        yield started


@pytest.fixture
def simulated_hosts(
    tmp_path: Path, postgres_url: str, simulator: Simulator
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    """Two daemons on one database, their engine the provider simulator."""
    org = _org(tmp_path / "org", _simulated(simulator))
    with _started(org, tmp_path, postgres_url) as started:
        yield started


@contextmanager
def _started(org: Path, root: Path, database: str) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    with DaemonProcess(org, root / "a", database=database).start() as first:
        second = DaemonProcess(org, root / "b", database=database).start()
        try:
            yield first, second
        finally:
            second.stop()


async def _request(host: DaemonProcess, params: Call[T]) -> T:
    """One call on a connection of its own to *host*."""
    async with await host.client() as client:
        return await client.request(params)


async def _session(opener: DaemonProcess, channel: str, sender: DaemonProcess, text: str) -> str:
    """ada's session in *channel*, opened on *opener*, its first turn *text*
    sent through *sender*."""
    session = (await _request(opener, SessionOpen("ada", channel))).session
    await _request(sender, SessionSend(session, text=text))
    return session


async def _requests(host: DaemonProcess, run: str) -> list[TurnRequest]:
    """Every request the engine received in *run*, as ``runs.context`` pages them."""
    requests: list[TurnRequest] = []
    after = 0
    while True:
        page = await _request(host, RunsContext(run, all=True, after=after))
        requests.extend(page.turns)
        if page.next is None:
            return requests
        after = page.next


async def test_a_session_alternating_between_hosts_extends_its_request_byte_for_byte(
    hosts: tuple[DaemonProcess, DaemonProcess],
) -> None:
    first, second = hosts
    opened = await _request(first, SessionOpen("ada", "c0"))
    session = opened.session
    for n in range(12):
        host = hosts[n % 2]
        result = await _request(host, SessionSend(session, text=f"turn {n}"))
        assert (result.run, result.turn) == (session, n + 1)
    again = await _request(second, SessionOpen("ada", "c0"))
    assert (again.session, again.turns) == (session, 12)
    # The first host's copy saw only its own turns until it looks again.
    here = await _request(first, SessionOpen("ada", "c0"))
    assert (here.session, here.turns) == (session, 12)
    requests = await _requests(first, session)
    assert requests == await _requests(second, session)
    assert [r.turn for r in requests] == list(range(1, 13))
    for earlier, later in itertools.pairwise(requests):
        assert later.system == earlier.system
        assert later.messages[: len(earlier.messages)] == earlier.messages
        assert len(later.messages) == len(earlier.messages) + 2


async def test_memory_and_gates_from_one_host_are_in_the_next_turn_on_the_other(
    hosts: tuple[DaemonProcess, DaemonProcess],
) -> None:
    first, second = hosts
    session = await _session(first, "c1", first, "hello")
    await _request(second, MemoryAdd("ada", "the deploy key rotates fridays"))
    gate = await _request(second, GateFile("ada", "approve the release"))
    await _request(first, SessionSend(session, text="what rotates fridays?"))
    sent = (await _requests(first, session))[-1].messages[-1].content
    assert "the deploy key rotates fridays" in sent
    assert "approve the release" in sent
    await _request(first, GateResolve(gate.id, "approved"))
    (listed,) = await _request(second, GateList("ada"))
    assert listed.status == "resolved"


async def test_a_session_s_trace_on_two_hosts_folds_to_the_notes_it_sent(
    hosts: tuple[DaemonProcess, DaemonProcess],
) -> None:
    """Each host's records say what changed since the one before, or, on a
    host that did not take the previous turn, every held note again: folded
    in order, they give after each turn the notes earlier turns sent."""
    session = (await _request(hosts[0], SessionOpen("ada", "c2"))).session
    for n in range(8):
        await _request(hosts[n % 2], MemoryAdd("ada", f"pager note {n} on call rota"))
        # Two turns on a host, then two on the other.
        await _request(hosts[n // 2 % 2], SessionSend(session, text="how is the pager rota?"))
    records = [r for r in (await _request(hosts[1], RunsShow(session))).records if r.kind == "turn"]
    requests = await _requests(hosts[0], session)
    sent: dict[str, int] = {}
    folded: dict[str, int] | None = None
    for turn, (record, request) in enumerate(zip(records, requests, strict=True), 1):
        memory = _memory(record)
        folded = held_items(folded, memory)
        assert folded == sent, turn
        assert memory.held == len(sent)
        for line in request.messages[-1].content.splitlines():
            if line.startswith('{"block":"memory"'):
                sent[msgspec.json.decode(line)["id"]] = turn
    assert len(sent) == 8
    # A host's first turn after the other's lists them whole; its second, the change.
    whole = [turn for turn, r in enumerate(records, 1) if _memory(r).newly_held is None]
    assert whole == [1, 3, 5, 7]


def _memory(record: ContextRecord) -> BlockTrace:
    return next(b for b in record.blocks if b.block == "memory")


async def test_forty_tasks_on_two_hosts_each_run_once_spread_over_both(
    hosts: tuple[DaemonProcess, DaemonProcess],
) -> None:
    first, second = hosts
    submitted = []
    for n in range(40):
        host = hosts[n % 2]
        task = await _request(host, TaskSubmit("ada", "c2", f"t{n}"))
        submitted.append(task.id)
    assert len(set(submitted)) == 40
    async with await first.client() as client:
        # Each answers once done, on whichever host ran it.
        for task_id in submitted:
            assert (await client.request(TaskGet(task_id, wait=60))).status == "done"
    tasks = await _request(first, TaskList())
    assert sorted(t.id for t in tasks) == sorted(submitted)
    assert all(len(t.runs) == 1 for t in tasks)
    runs = {r.id: r for r in await _request(second, RunsList())}
    ran_on = {runs[t.runs[0]].host for t in tasks}
    assert len(ran_on) == 2


def _simulated(simulator: Simulator) -> str:
    return f'kind = "openai"\nmodel = "sim-1"\nbase_url = "{simulator.openai_url}"'


async def test_a_host_killed_mid_turn_releases_the_session_within_its_lease(
    simulated_hosts: tuple[DaemonProcess, DaemonProcess],
    simulator: Simulator,
) -> None:
    first, second = simulated_hosts
    session = await _session(first, "c0", first, "one")
    simulator.script(Stall())
    await _killed_in_a_send(first, session, partial(simulator.wait_for_requests, 2))
    killed_at = time.monotonic()
    with anyio.fail_after(LEASE_S + 10):
        reply = await _request(second, SessionSend(session, text="three"))
    assert time.monotonic() - killed_at < LEASE_S + 5
    assert reply.turn == 3
    requests = await _requests(second, session)
    # The cut-off turn's user message was traced and is sent again, never lost.
    assert [r.turn for r in requests] == [1, 2, 3]
    assert requests[2].messages[: len(requests[1].messages)] == requests[1].messages


async def test_a_session_a_host_killed_mid_rollover_left_open_is_ended_by_the_live_one(
    simulated_hosts: tuple[DaemonProcess, DaemonProcess], simulator: Simulator, postgres_url: str
) -> None:
    first, second = simulated_hosts
    old = await _session(first, "c0", first, "one")
    # The provider refuses the next turn as too long: the first host
    # rolls the session over, and is killed while the new one starts.
    simulator.context_tokens = 10
    async with await psycopg.AsyncConnection.connect(postgres_url) as slow:
        await slow.execute("LOCK TABLE session_states")
        await _killed_in_a_send(first, old, partial(first.logged, f"session {old}: its successor "))
    simulator.context_tokens = None
    (new,) = [r.id for r in await _request(second, RunsList()) if r.id != old]
    # Once the dead host's lease on the old session ran out, the live
    # host's lease keeper ends the new one, which nothing leads to.
    with anyio.fail_after(LEASE_S + 20):
        ended = (await _request(second, RunsShow(new, wait=LEASE_S + 10))).info
    assert ended.status == "failed"
    assert "no pair leads to it" in (ended.error or "")
    # The pair goes on in the session its pointer names.
    assert (await _request(second, SessionOpen("ada", "c0"))).session == old
    after = await _request(second, SessionSend(old, text="three"))
    assert (after.run, after.turn) == (old, 3)


async def _killed_in_a_send(
    host: DaemonProcess, session: str, reached: Callable[[], Awaitable[object]]
) -> None:
    """Send a turn to *session* on *host*, and kill -9 the host once *reached*
    says the turn got where the test wants it cut off."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(_send_ignoring_the_kill, host, session)
        with anyio.fail_after(20):
            await reached()
        host.stop(9)


async def _send_ignoring_the_kill(host: DaemonProcess, session: str) -> None:
    try:
        await _request(host, SessionSend(session, text="two"))
    except Exception:  # the host is killed under this call
        return


async def test_a_task_whose_host_died_is_finished_by_the_other(
    tmp_path: Path, postgres_url: str, simulator: Simulator
) -> None:
    org = _org(tmp_path / "org", _simulated(simulator))
    with DaemonProcess(org, tmp_path / "a", database=postgres_url).start() as first:
        simulator.script(Stall())
        task = await _request(first, TaskSubmit("ada", "c3", "x"))
        with anyio.fail_after(10):
            await simulator.wait_for_requests(1)
        first.stop(9)
        second = DaemonProcess(org, tmp_path / "b", database=postgres_url).start()
        try:
            done = await _request(second, TaskGet(task.id, wait=LEASE_S + 15))
            # Claimed again once the dead host's lease ran out; answered once done.
            assert done.status == "done"
            assert len(done.runs) == 2
            cut = await _request(second, RunsShow(done.runs[0]))
            assert cut.info.status == "interrupted"
        finally:
            second.stop()


class _Stalling(NamedTuple):
    daemon: InProcessDaemon
    client: RosterClient
    clock: ManualClock
    other: PostgresState
    slow: psycopg.AsyncConnection[TupleRow]


@asynccontextmanager
async def _stalling(root: Path, url: str, simulator: Simulator) -> AsyncIterator[_Stalling]:
    """This host in process on the simulator, whose lease keeper sleeps on
    a clock that never moves: its leases run out as a stalled host's would,
    once "the other host" says so. Beside it, the other host's stores, and
    a connection of the test's own to hold a row or a table locked."""
    org = _org(root / "org", _simulated(simulator))
    clock = ManualClock()
    async with (
        in_process_client(org, root / "a", clock=clock, database=url) as (daemon, client),
        PostgresState(url) as other,
        await psycopg.AsyncConnection.connect(url) as slow,
    ):
        yield _Stalling(daemon, client, clock, other, slow)


async def test_a_task_another_host_took_over_is_left_for_that_host_to_record(
    tmp_path: Path, postgres_url: str, simulator: Simulator
) -> None:
    simulator.script(Held())
    async with _stalling(tmp_path, postgres_url, simulator) as (daemon, client, clock, other, _):
        task = await client.request(TaskSubmit("ada", "c3", "x"))
        with anyio.fail_after(10):
            await simulator.wait_for_requests(1)
        # What another host does once this one stalled past the task's lease:
        # it claims the task, marks the cut-off run, and runs the task again
        # under its own. (Its claim keeps this host's idle workers off it.)
        later = clock() + 10 * LEASE_S
        running = await other.tasks.claim("other", later, later + LEASE_S)
        assert running is not None and running.id == task.id
        cut = await other.runs.info(running.runs[-1])
        await other.runs.write_info(cut_off(cut, cut.created_at + 1))
        taken_over = msgspec.structs.replace(running, runs=(*running.runs, "t-other"))
        await other.tasks.update(taken_over)
        simulator.release()
        # This host's reply finds its run changed: it records nothing of it.
        await daemon.logged(f"run {cut.id} changed since this host read it")
        await daemon.logged(f"task {task.id}: ")
        assert f"task {task.id} failed" not in daemon.log()
        assert await other.tasks.get(task.id) == taken_over
        assert (await other.runs.info(cut.id)).status == "interrupted"


async def test_a_stop_does_not_wait_for_an_idle_worker_s_look_for_a_task(
    tmp_path: Path, postgres_url: str
) -> None:
    # A short drain_s: a stop that waits on the worker runs it out soon.
    sections = f"[daemon]\nlease_s = {LEASE_S}\ntask_workers = 1\ndrain_s = 2"
    org = write_org(tmp_path / "org", workers=["ada"], sections=sections)
    async with await psycopg.AsyncConnection.connect(postgres_url) as slow:
        async with daemon_in_process(org, tmp_path / "a", database=postgres_url) as daemon:
            # The idle worker's next look for a task waits on the table, as it
            # would on a database too busy to answer or a pool with no free
            # connection, for as long as the pool's timeout.
            await slow.execute("LOCK TABLE tasks")
            await daemon.until_logged(
                lambda log: log.count("looking for a task") > log.count("no task to run")
            )
        await slow.rollback()
    # No task was running: the drain had nothing to wait for.
    assert "drain cut short" not in daemon.log()
    assert "stopped" in daemon.log()


async def test_a_stop_lets_a_look_for_a_task_under_way_finish(
    tmp_path: Path, postgres_url: str
) -> None:
    # Cut off mid-statement, a claim would leave its connection in a state
    # the pool can only throw away, and the driver would warn of it.
    sections = f"[daemon]\nlease_s = {LEASE_S}\ntask_workers = 2\ndrain_s = 20"
    org = write_org(tmp_path / "org", workers=["ada"], sections=sections)
    with DaemonProcess(org, tmp_path / "a", database=postgres_url).start() as daemon:
        async with await psycopg.AsyncConnection.connect(postgres_url) as slow:
            await slow.execute("LOCK TABLE tasks")
            with anyio.fail_after(10):
                await waiting_on_locks(postgres_url, 1)
            daemon.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            # The drain began while the claim waits on the table.
            with anyio.fail_after(10):
                await daemon.logged("task workers draining")
            await slow.rollback()
        code = daemon.wait()
    log = daemon.log()
    assert code == 0, log
    assert "query cancellation interrupted" not in log
    assert "discarding closed connection" not in log


async def test_a_task_claimed_as_the_drain_begins_is_given_back_not_run(
    tmp_path: Path, postgres_url: str
) -> None:
    sections = f"[daemon]\nlease_s = {LEASE_S}\ntask_workers = 2\ndrain_s = 20"
    org = write_org(tmp_path / "org", workers=["ada"], sections=sections)
    clock = ManualClock(1_800_000_000.0)
    async with PostgresState(postgres_url) as other:
        task = await other.tasks.submit("ada", "c0", "later", clock())
        # Another host holds it: this one's claims find nothing until its lease runs out.
        assert await other.tasks.claim("other", clock(), clock() + 10 * LEASE_S) is not None
        async with (
            await psycopg.AsyncConnection.connect(postgres_url) as slow,
            # Its task unlocks the table while the daemon's block ends in a drain.
            anyio.create_task_group() as tg,
            daemon_in_process(org, tmp_path / "a", clock=clock, database=postgres_url) as daemon,
        ):
            clock.advance(20 * LEASE_S)
            await slow.execute("LOCK TABLE tasks")
            # A look logged from now on reads the new time and waits on the
            # table (those before it saw the task held).
            seen = daemon.log().count("looking for a task")
            await daemon.until_logged(lambda log: log.count("looking for a task") > seen)

            async def unlock_once_draining() -> None:
                await daemon.logged("task workers draining")
                await slow.rollback()

            tg.start_soon(unlock_once_draining)
        assert f"task {task.id}: claimed as the drain began, given back" in daemon.log()
        # Given back: another host claims it at once, not once this host's lease ran out.
        now = clock()
        again = await other.tasks.claim("third", now, now + LEASE_S)
        assert again is not None and again.id == task.id
        assert again.runs == ()


async def test_a_task_taken_over_after_its_run_ended_keeps_the_state_the_other_host_wrote(
    tmp_path: Path, postgres_url: str, simulator: Simulator
) -> None:
    simulator.script(Held())
    async with _stalling(tmp_path, postgres_url, simulator) as stalling:
        daemon, client, clock, other, slow = stalling
        task = await client.request(TaskSubmit("ada", "c3", "x"))
        with anyio.fail_after(10):
            await simulator.wait_for_requests(1)
        running = await other.tasks.get(task.id)
        # The run's lease row locked: this host stalls once its run ended,
        # giving that lease up, before it records the task done.
        await slow.execute("SELECT FROM leases WHERE key = %s FOR UPDATE", (running.runs[-1],))
        simulator.release()
        ended = await client.request(RunsShow(running.runs[-1], wait=10))
        assert ended.info.status == "done"
        # Meanwhile another host finds the task's lease run out and runs it again.
        later = clock() + 10 * LEASE_S
        claimed = await other.tasks.claim("other", later, later + LEASE_S)
        assert claimed == running
        taken_over = msgspec.structs.replace(running, runs=(*running.runs, "t-other"))
        await other.tasks.update(taken_over)
        await slow.rollback()
        # This host wakes: the task is no longer its own to record.
        await daemon.logged(f"task {task.id}: ")
        assert await other.tasks.get(task.id) == taken_over


async def test_a_host_never_claims_again_a_task_it_runs_whose_lease_ran_out(
    tmp_path: Path, postgres_url: str, simulator: Simulator
) -> None:
    simulator.script(Held(), Held())
    async with _stalling(tmp_path, postgres_url, simulator) as (daemon, client, clock, _, slow):
        first = await client.request(TaskSubmit("ada", "c3", "the first task"))
        with anyio.fail_after(10):
            await simulator.wait_for_requests(1)
        (run,) = (await client.request(TaskGet(first.id))).runs
        # The lease keeper is held up renewing the run's lease, which it
        # renews before the task's: the task's lease runs out while this
        # host runs it.
        await slow.execute("SELECT FROM leases WHERE key = %s FOR UPDATE", (run,))
        clock.advance(10 * LEASE_S)
        # The idle pool worker wakes for a new task and claims the oldest free one.
        second = await client.request(TaskSubmit("ada", "c3", "the second task"))
        with anyio.fail_after(10):
            await simulator.wait_for_requests(2)
        assert b"the second task" in simulator.bodies()[1]
        await slow.rollback()
        simulator.release()
        for task in (first, second):
            done = await client.request(TaskGet(task.id, wait=30))
            assert (done.status, len(done.runs)) == ("done", 1)
        assert "left to the host" not in daemon.log()


async def test_two_turns_at_once_of_a_session_this_host_wakes_take_turns(
    tmp_path: Path, postgres_url: str, simulator: Simulator
) -> None:
    org = _org(tmp_path / "org", _simulated(simulator))
    async with in_process_client(org, tmp_path / "a", database=postgres_url) as (_, client):
        session = (await client.session_open("ada", "c0")).session
        await client.session_send(session, "one")
    # Another host (here: the next start) has the session in the database only.
    simulator.script(Held())
    results: dict[str, int] = {}
    async with (
        in_process_client(org, tmp_path / "b", database=postgres_url) as (daemon, first),
        await daemon.client() as second,
        await psycopg.AsyncConnection.connect(postgres_url) as slow,
    ):

        async def send(client: RosterClient, text: str) -> None:
            results[text] = (await client.session_send(session, text)).turn

        # Both turns wake the session at once: its frozen state read slowly.
        await slow.execute("LOCK TABLE session_states")
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, first, "two")
            tg.start_soon(send, second, "three")
            await daemon.logged(f"session {session}: reading it from the store", times=2)
            await slow.rollback()
            with anyio.fail_after(10):
                await simulator.wait_for_requests(1)
            simulator.release()
    assert sorted(results.values()) == [2, 3]
    # One copy of the session, whose turns wait for each other.
    assert daemon.log().count(f"session {session} resumed") == 1


async def test_a_rollover_another_host_made_first_keeps_the_pairs_session(
    tmp_path: Path, postgres_url: str, simulator: Simulator
) -> None:
    async with _stalling(tmp_path, postgres_url, simulator) as stalling:
        daemon, client, clock, other, slow = stalling
        session = (await client.session_open("ada", "c0")).session
        await client.session_send(session, "one")
        # The provider refuses the next turn as too long: this host rolls
        # the session over, and stalls while it starts the new one.
        simulator.context_tokens = 10
        await slow.execute("LOCK TABLE session_states")
        failed: list[RpcError] = []

        async def send() -> None:
            try:
                await client.session_send(session, "two")
            except RpcError as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await daemon.logged(f"session {session}: rolling over")
            # Meanwhile another host, past this one's lease, rolls it over first.
            later = clock() + 10 * LEASE_S
            assert await other.runs.lease(session, "other", later, later + LEASE_S) is None
            old = await other.runs.info(session)
            new = msgspec.structs.replace(old, id="s-other", created_at=later, rolled_from=session)
            await other.runs.create(new)
            await other.runs.set_session("ada", "c0", "s-other")
            rolled = msgspec.structs.replace(old, status="rolled-over", rolled_to="s-other")
            await other.runs.write_info(rolled)
            await other.runs.release(session, "other")
            await slow.rollback()
        assert failed
        # The pair's session is the one its old session rolled over to.
        assert await other.runs.session_for("ada", "c0") == "s-other"
        assert (await other.runs.info(session)).rolled_to == "s-other"


async def test_a_client_of_either_host_reads_the_same_trace_bytes(
    hosts: tuple[DaemonProcess, DaemonProcess],
) -> None:
    first, second = hosts
    session = await _session(first, "c3", second, "odd \u2028 text \U0001f600")
    async with (
        await RosterClient.connect(first.socket) as a,
        await RosterClient.connect(second.socket) as b,
    ):
        shown_a = await a.runs_show(session)
        shown_b = await b.runs_show(session)
    assert shown_a == shown_b


async def test_a_turn_on_one_host_waits_for_a_turn_held_past_its_lease_on_the_other(
    tmp_path: Path, postgres_url: str, simulator: Simulator
) -> None:
    org = _org(tmp_path / "org", _simulated(simulator))
    finished: list[str] = []

    async def send(host: DaemonProcess, name: str, session: str) -> None:
        await _request(host, SessionSend(session, text=name))
        finished.append(name)

    with _started(org, tmp_path, postgres_url) as (first, second):
        session = await _session(first, "c0", first, "one")
        # Longer than the lease: the first host must renew it to keep the turn.
        simulator.script(Delay(LEASE_S * 1.5))
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, first, "slow", session)
            with anyio.fail_after(10):
                await simulator.wait_for_requests(2)
            tg.start_soon(send, second, "waiting", session)
        assert finished == ["slow", "waiting"]
        requests = await _requests(second, session)
        assert [r.turn for r in requests] == [1, 2, 3]
        assert [m.role for m in requests[2].messages] == ["user", "assistant"] * 2 + ["user"]
        assert "lease lost" not in first.log() + second.log()


def test_serving_a_database_without_a_socket_path_is_one_clear_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ROSTER_SOCKET", "RUNTIME_DIRECTORY")}
    done = subprocess.run(
        [sys.executable, "-m", "rosterd.cli", "serve", "--org", str(_org(tmp_path / "org")),
         "--state", "postgresql://rosterd:secret@127.0.0.1:1/roster"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "roster: with the state in a database, name the socket: --socket PATH or ROSTER_SOCKET"
    )


async def test_a_database_outage_fails_turns_clearly_and_the_daemon_serves_on_once_it_is_back(
    tmp_path: Path,
) -> None:
    server = await anyio.to_thread.run_sync(PostgresServer.start)
    try:
        url = server.url(server.create_database())
        host = DaemonProcess(_org(tmp_path / "org"), tmp_path / "a", database=url).start()
        try:
            async with await host.client() as client:
                opened = await client.session_open("ada", "c0")
                session = opened.session
                await client.session_send(session, "before")
                await anyio.to_thread.run_sync(server.halt)
                with pytest.raises(RpcError) as failed:
                    await client.session_send(session, "during")
                assert "failed" in failed.value.message
                status = await client.daemon_status()
                assert status.sessions == 1
                await anyio.to_thread.run_sync(server.resume)
                after = await client.session_send(session, "after")
                shown = await client.runs_show(session)
        finally:
            code = host.stop()
    finally:
        await anyio.to_thread.run_sync(server.stop)
    assert code == 0
    users = [e.content for e in shown.transcript if e.role == "user"]
    assert after.turn == len(users) and "before" in users[0] and "after" in users[-1]
    assert "Traceback" not in host.log()


async def test_a_session_rolled_over_on_one_host_is_followed_by_the_other(
    tmp_path: Path, postgres_url: str
) -> None:
    org = _org(tmp_path / "org")
    loaded = load_org(org)
    system = compile_system(
        loaded, loaded.scope(Surface.SESSION, "ada", "c0"), RunMeta(run="t", turn=0, now=0.0)
    )
    toml = org / "org.toml"
    toml.write_text(
        f"{toml.read_text()}\n[context]\nsession_chars = {len(system.text) + 1500}\n"
        "history_messages = 2\n"
    )
    with _started(org, tmp_path, postgres_url) as (first, second):
        # Both hosts hold a warm copy of the session before it rolls over.
        old = await _session(first, "c0", second, "warm on b")
        rolled = None
        for n in range(20):
            result = await _request(first, SessionSend(old, text=f"q{n} " * 20))
            if result.rolled_from is not None:
                rolled = result
                break
        assert rolled is not None and rolled.rolled_from == old
        new = rolled.run
        # The other host's copy is stale: its next turn goes to the successor.
        on_b = await _request(second, SessionSend(old, text="after on b"))
        assert (on_b.run, on_b.turn) == (new, 2)
        reopened = await _request(second, SessionOpen("ada", "c0"))
        assert reopened.session == new
        requests = await _requests(first, new)
        assert requests[1].messages[: len(requests[0].messages)] == requests[0].messages
        old_info = (await _request(second, RunsShow(old))).info
        assert (old_info.status, old_info.rolled_to) == ("rolled-over", new)


async def test_a_session_closed_on_one_host_is_closed_on_the_other(
    hosts: tuple[DaemonProcess, DaemonProcess],
) -> None:
    first, second = hosts
    session = await _session(first, "c1", second, "warm on b")
    await _request(first, SessionClose(session))
    with pytest.raises(RpcError) as closed:
        await _request(second, SessionSend(session, text="too late"))
    assert closed.value.code == 1004
    fresh = await _request(second, SessionOpen("ada", "c1"))
    assert fresh.session != session
    assert (await _request(first, RunsShow(session))).info.status == "closed"


async def test_a_direct_run_cut_off_by_a_dead_host_is_marked_by_the_live_one(
    simulated_hosts: tuple[DaemonProcess, DaemonProcess],
    simulator: Simulator,
) -> None:
    first, second = simulated_hosts
    simulator.script(Stall())
    async with anyio.create_task_group() as tg:
        tg.start_soon(_direct_ignoring_the_kill, first)
        with anyio.fail_after(10):
            await simulator.wait_for_requests(1)
        first.stop(9)
    (listed,) = [r for r in await _request(second, RunsList()) if r.surface == "direct"]
    assert listed.status == "open"
    # The live host's lease keeper finds it once the dead host's lease ran out.
    with anyio.fail_after(LEASE_S + 10):
        info = (await _request(second, RunsShow(listed.id, wait=LEASE_S + 10))).info
    assert info.status == "interrupted"


async def _direct_ignoring_the_kill(host: DaemonProcess) -> None:
    try:
        await _request(host, RunDirect("ada", text="hello"))
    except Exception:  # the host is killed under this call
        return
