"""What a session turn costs on PostgreSQL, in round trips to the server.

The daemon runs in process on a real server, its pool's connections
counting every request they wait for (``postgres.RoundTrips``); the clock
is the test's, so no lease renewal or idle check runs between turns.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from harness import ManualClock, in_process_client
from postgres import RoundTrips

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
