"""A start indexes the notes of each worker a session is open for, before
that session's next turn asks; the other workers' notes wait for first use."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import msgspec
import pytest
from harness import Cli, DaemonProcess
from orgs import write_org

from rosterd.client import RosterClient
from rosterd.compiler import MemoryItem

pytestmark = pytest.mark.anyio


def daemon_of(tmp_path: Path, database: str | None = None) -> DaemonProcess:
    """A daemon (not started) of workers ada and bob, both in channel c0, on
    the echo engine, its state in a directory or in *database*."""
    org = write_org(tmp_path / "org", workers=["ada", "bob"])
    return DaemonProcess(org, tmp_path / "state", database=database)


@pytest.fixture(params=["files", "postgres"])
def process(request: pytest.FixtureRequest, tmp_path: Path) -> DaemonProcess:
    if request.param == "postgres":
        return daemon_of(tmp_path, request.getfixturevalue("postgres_url"))
    return daemon_of(tmp_path)


async def remember(client: RosterClient, worker: str, count: int) -> None:
    for n in range(count):
        await client.memory_add(worker, f"{worker} noted release step {n}")


async def left_open(process: DaemonProcess, notes: int) -> str:
    """Ada's session, with *notes* notes of hers and two of bob's, left open
    by a clean stop of *process*."""
    process.start()
    async with await process.client() as client:
        await remember(client, "ada", notes)
        await remember(client, "bob", 2)
        session = (await client.session_open("ada", "c0")).session
        await client.session_send(session, "what is the release step?")
    process.stop()
    return session


async def test_a_start_indexes_the_notes_of_workers_with_an_open_session(
    process: DaemonProcess,
) -> None:
    with process:
        session = await left_open(process, 3)
        process.start()
        with anyio.fail_after(30):
            await process.logged("warm-up: indexed ada's 3 notes in")
        async with await process.client() as client:
            assert (await client.daemon_status()).warming == ()
            # The session goes on, and its next turn sees a note added since.
            await client.memory_add("ada", "release step 3 moved to Friday")
            reply = await client.session_send(session, "and the release step now?")
        assert reply.turn == 2
        assert "memory x1" in reply.text
        # Bob has no session: his notes wait for his first turn.
        assert "notes of bob" not in process.log()


async def test_a_worker_whose_notes_cannot_be_read_is_left_to_its_first_turn(
    tmp_path: Path,
) -> None:
    with daemon_of(tmp_path) as process:
        await left_open(process, 2)
        # Ada's notes are no longer a file that can be read.
        notes = process.state / "memory" / "ada.jsonl"
        notes.unlink()
        notes.mkdir()

        process.start()
        with anyio.fail_after(30):
            await process.logged("warm-up: the notes of ada were not indexed")
        async with await process.client() as client:
            assert (await client.daemon_status()).warming == ()
            # The daemon serves on: bob's run goes through.
            assert (await client.run_direct("bob", "hi")).text.startswith("[echo]")
        shutil.rmtree(notes)


async def test_a_pair_whose_session_is_gone_warms_nothing(tmp_path: Path) -> None:
    with daemon_of(tmp_path) as process:
        session = await left_open(process, 2)
        # The pair's pointer is left naming a run that is no longer there.
        shutil.rmtree(process.state / "runs" / session)

        process.start()
        async with await process.client() as client:
            assert (await client.daemon_status()).warming == ()
            reopened = (await client.session_open("ada", "c0")).session
            assert reopened != session
        assert "warm-up" not in process.log()


@pytest.mark.long
async def test_a_stop_during_the_warm_up_exits_cleanly(tmp_path: Path, cli: Cli) -> None:
    with daemon_of(tmp_path) as process:
        session = await left_open(process, 1)
        # Months of ada's notes, as the log holds them: the warm-up takes a while.
        encode = msgspec.json.Encoder().encode
        lines = (
            encode(MemoryItem(id=f"m-{n}", text=f"release step {n} of the train", created_at=n))
            for n in range(2, 60_002)
        )
        with (process.state / "memory" / "ada.jsonl").open("ab") as notes:
            notes.writelines(line + b"\n" for line in lines)

        process.start()
        async with await process.client() as client:
            assert (await client.daemon_status()).warming == ("ada",)
        # `roster status` says it too, while it lasts.
        status = await cli.in_thread("status", "--socket", str(process.socket))
        assert "warming up (indexing their notes): ada\n" in status
        assert process.stop() == 0
        assert "Traceback" not in process.log()
        # The next start warms her up and the session goes on.
        process.start()
        with anyio.fail_after(30):
            await process.logged("warm-up: indexed ada's 60001 notes in")
        async with await process.client() as client:
            assert (await client.session_send(session, "and now?")).turn == 2
