"""What a session turn costs on PostgreSQL, in round trips to the server,
and what a start reads.

The daemon runs in process on a real server, its pool's connections
counting every request they wait for (``postgres.RoundTrips``) or every
record they fetch (``postgres.RecordsRead``); the clock is the test's, so
no lease renewal or idle check runs between turns.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import anyio
import httpx
import pytest
from harness import ManualClock, daemon_in_process, in_process_client
from msgspec.structs import replace
from postgres import RecordsRead, RoundTrips
from prometheus import free_port

from rosterd.stores.postgres import PostgresState

pytestmark = pytest.mark.anyio


async def test_a_warm_turn_takes_at_most_two_round_trips(
    org_dir: Path, tmp_path: Path, postgres_url: str
) -> None:
    counted = RoundTrips()
    stores = PostgresState(postgres_url, connection_class=counted.connection_class)
    async with in_process_client(
        org_dir, tmp_path / "state", clock=ManualClock(), database=postgres_url, stores=stores
    ) as (_, client):
        session = (await client.session_open("ada", "general")).session
        # The first turns wake what the session reads and let psycopg
        # prepare the statements it repeats.
        for n in range(8):
            await client.session_send(session, f"warming up {n}")
        per_turn = []
        for n in range(5):
            counted.trips.clear()
            reply = await client.session_send(session, f"turn {n}")
            assert reply.turn == 9 + n
            per_turn.append(counted.of_turns())
    # The turn's reads come from the warm session; its writes go in two
    # transactions: the trace and the user turn (the lease taken with them)
    # before the engine is called, the reply and the channel posts (the
    # lease given up with them) before the client gets the result.
    assert [len(trips) for trips in per_turn] == [2] * 5, per_turn


async def test_a_workers_notes_are_read_once_for_its_sessions_first_turns(
    postgres_url: str,
) -> None:
    # 200 sessions of one worker sending their first turns at once used to
    # read its notes 200 times, one after another under the worker's lock:
    # the last turns waited seconds. Readers waiting meanwhile share a read
    # that began after they asked.
    counted = RoundTrips()
    async with (
        PostgresState(postgres_url, connection_class=counted.connection_class) as here,
        PostgresState(postgres_url) as there,
    ):
        await there.memory.add("ada", "the build is green", "general", 1.0)

        # A warm turn's view loads the index the host does not hold yet; a
        # careful one catches up with what other hosts added since.
        async def view(cached: bool, sizes: list[int]) -> None:
            sizes.append(len(await here.memory.view("ada", cached=cached)))

        for cached, notes in ((True, 1), (False, 2)):
            counted.trips.clear()
            sizes: list[int] = []
            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(view, cached, sizes)
            reads = [trip for trip in counted.trips if any("memory_notes" in s for s in trip)]
            assert sizes == [notes] * 20
            assert 1 <= len(reads) <= 2, reads
            await there.memory.add("ada", "the deploy is done", "general", 2.0)


async def test_a_start_reads_the_tasks_a_gate_may_move_not_the_history(
    org_dir: Path, tmp_path: Path, postgres_url: str
) -> None:
    # A kill fell between a gate's write and its task's pause, after a
    # history of tasks continued by their gates: the next start pauses the
    # task, reading the gate that waits and that task, no row of the history.
    async with PostgresState(postgres_url) as before:
        history = set()
        for n in range(20):
            task = await before.tasks.submit("ada", "releases", f"task {n}", float(n))
            gate = await before.gates.file("ada", "ok?", float(n), "releases", f"t-{n}")
            await before.gates.resolve(gate.id, "yes", "", float(n))
            await before.tasks.update(replace(task, status="done", runs=(f"t-{n}", f"t-{n}-2")))
            history |= {task.id, gate.id}
        cut = await before.tasks.submit("ada", "releases", "cut off", 30.0)
        await before.tasks.update(replace(cut, status="done", runs=("t-cut",)))
        waits = await before.gates.file("ada", "sign-off?", 31.0, "releases", "t-cut")
    read = RecordsRead()
    async with PostgresState(postgres_url, connection_class=read.connection_class) as stores:
        # Opening indexes every gate for the briefings, once per host: what
        # the start reads to put tasks where their gates say comes after.
        read.ids.clear()
        async with in_process_client(
            org_dir,
            tmp_path / "state",
            clock=ManualClock(),
            database=postgres_url,
            stores=nullcontext(stores),
        ) as (_, client):
            found = set(read.ids)
            paused = await client.task_get(cut.id)
    assert paused.status == "paused"
    assert found == {cut.id, waits.id}
    assert not history & read.ids


async def test_the_task_gauge_counts_the_tasks_without_reading_one(
    org_dir: Path, tmp_path: Path, postgres_url: str
) -> None:
    # The gauge used to read every task each round: the whole table every
    # ten seconds, growing with the history. A history of finished tasks,
    # which the start has no reason to read, shows what the gauge reads.
    async with PostgresState(postgres_url) as before:
        tasks = before.tasks
        finished = [await tasks.submit("bob", "ops", f"job {n}", 1.0) for n in range(20)]
        for n, task in enumerate(finished):
            await tasks.update(replace(task, status="failed" if n % 4 == 0 else "done"))
    history = {task.id for task in finished}
    listen = f"127.0.0.1:{free_port()}"
    with (org_dir / "org.toml").open("a") as toml:
        toml.write(f'\n[metrics]\nlisten = "{listen}"\n')
    read = RecordsRead()
    async with (
        PostgresState(postgres_url, connection_class=read.connection_class) as stores,
        daemon_in_process(
            org_dir,
            tmp_path / "state",
            clock=ManualClock(),
            database=postgres_url,
            stores=nullcontext(stores),
        ),
        httpx.AsyncClient() as http,
    ):
        # The first count is in before the daemon is ready.
        exposition = (await http.get(f"http://{listen}/metrics")).text
    for status, count in (("done", 15), ("failed", 5), ("queued", 0)):
        assert f'rosterd_tasks{{status="{status}"}} {count}.0' in exposition, status
    assert not history & read.ids
