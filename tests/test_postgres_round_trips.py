"""What a session turn costs on PostgreSQL, in round trips to the server.

The daemon runs in process on a real server, its pool's connections
counting every request they wait for (``postgres.RoundTrips``); the clock
is the test's, so no lease renewal or idle check runs between turns.
"""

from __future__ import annotations

from pathlib import Path

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
