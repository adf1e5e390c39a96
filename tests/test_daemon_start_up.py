"""What a start reads of the runs: those not listed settled, never the rest.

A run is listed in ``settled-runs.jsonl`` once it ended and a start (or,
a batch at a time, the serving daemon) recorded it: no later start opens
its files. Whether one did is seen in the files' access times, which this
filesystem records on the first read after a write (``relatime``); where it
does not, the test that relies on it is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable
from pathlib import Path

import anyio
import anyio.to_thread
import msgspec
import pytest
from harness import DaemonProcess, opened_session
from orgs import simulated_engine, write_org
from simulator import Simulator, Stall
from test_stores_runs import NOW

from rosterd import RosterError
from rosterd.protocol import RunInfo
from rosterd.stores.files import FileRuns
from rosterd.stores.files._settled import SETTLED_BATCH

pytestmark = pytest.mark.anyio

LONG_AGO = 1.0


def settled(state: Path) -> list[str]:
    """The runs ``settled-runs.jsonl`` lists, in its order; every line whole."""
    data = (state / "settled-runs.jsonl").read_bytes()
    assert data == b"" or data.endswith(b"\n")
    return [msgspec.json.decode(line, type=str) for line in data.splitlines()]


def files_of(state: Path, runs: list[str]) -> list[Path]:
    return [path for run in runs for path in (state / "runs" / run).iterdir()]


def reads_are_recorded(tmp_path: Path) -> bool:
    """Whether reading a file whose access time is older than its change moves it."""
    probe = tmp_path / "probe"
    probe.write_bytes(b"x")
    os.utime(probe, (LONG_AGO, probe.stat().st_mtime))
    probe.read_bytes()
    return probe.stat().st_atime != LONG_AGO


def stalling_daemon(tmp_path: Path, simulator: Simulator) -> DaemonProcess:
    """A daemon serving ada in channel c0 on *simulator*."""
    org = write_org(tmp_path / "org", workers=["ada"], engine=simulated_engine(simulator))
    return DaemonProcess(org, tmp_path / "state").start()


async def unanswered(call: Awaitable[object]) -> None:
    """*call*, whose daemon dies before it answers."""
    with pytest.raises(RosterError, match="closed the connection"):
        await call


async def cut_off_by_a_kill(process: DaemonProcess, simulator: Simulator) -> str:
    """The direct run whose engine call stalls when *process* gets kill -9."""
    arrived = len(simulator.requests)
    simulator.script(Stall())
    async with await process.client() as client, anyio.create_task_group() as tg:
        tg.start_soon(unanswered, client.run_direct("ada", "hi"))
        with anyio.fail_after(20):
            await simulator.wait_for_requests(arrived + 1)
        process.kill9()
    runs = process.state / "runs"
    infos = [
        msgspec.json.decode((run / "run.json").read_bytes(), type=RunInfo) for run in runs.iterdir()
    ]
    (run,) = [info.id for info in infos if info.status == "open" and info.surface == "direct"]
    return run


async def test_a_start_opens_no_file_of_the_runs_an_earlier_start_settled(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    if not reads_are_recorded(tmp_path):
        pytest.skip("this filesystem does not record reads (noatime)")
    async with opened_session(daemon) as (client, session):
        finished = [(await client.run_direct("ada", text)).run for text in ("hi", "bye")]
        await client.session_send(session, "hello")
    # A clean stop lists the runs it ended settled.
    assert daemon.stop() == 0
    for path in files_of(daemon.state, finished):
        os.utime(path, (LONG_AGO, path.stat().st_mtime))

    daemon.start()
    unread = {path.name: path.stat().st_atime for path in files_of(daemon.state, finished)}
    async with await daemon.client() as client:
        resumed = await client.session_send(session, "again")
        listed = {r.id: r.status for r in await client.runs_list()}
    assert unread == {name: LONG_AGO for name in ("run.json", "context.jsonl", "transcript.jsonl")}
    assert resumed.turn == 2
    assert listed == {finished[0]: "done", finished[1]: "done", session: "open"}
    # Listing the runs read them: the times above would have shown a read.
    assert (daemon.state / "runs" / finished[0] / "run.json").stat().st_atime != LONG_AGO
    assert sorted(settled(daemon.state)) == sorted(finished)


async def test_a_state_from_before_the_settled_list_is_read_whole_once_and_listed(
    tmp_path: Path, simulator: Simulator
) -> None:
    process = stalling_daemon(tmp_path, simulator)
    async with opened_session(process, channel="c0") as (client, session):
        finished = (await client.run_direct("ada", "bye")).run
        await client.session_send(session, "hello")
    cut_off = await cut_off_by_a_kill(process, simulator)
    # What the code before the list left: no list.
    (process.state / "settled-runs.jsonl").unlink()

    process.start()
    async with await process.client() as client:
        resumed = await client.session_send(session, "again")
        listed = {r.id: r.status for r in await client.runs_list()}
    process.stop()
    assert listed == {finished: "done", cut_off: "interrupted", session: "open"}
    assert resumed.turn == 2
    assert sorted(settled(process.state)) == sorted([finished, cut_off])
    assert "recovery read 3 of 3 runs (no settled list yet)" in process.log()


async def test_a_torn_last_line_of_the_list_is_cut_and_its_run_read_and_listed_again(
    daemon: DaemonProcess,
) -> None:
    async with await daemon.client() as client:
        finished = {(await client.run_direct("ada", text)).run for text in ("a", "b", "c")}
    daemon.restart()
    daemon.kill9()
    path = daemon.state / "settled-runs.jsonl"
    *whole, torn = settled(daemon.state)
    path.write_bytes(path.read_bytes()[:-5])

    daemon.start()
    async with await daemon.client() as client:
        listed = {r.id: r.status for r in await client.runs_list()}
    assert listed == dict.fromkeys(finished, "done")
    assert settled(daemon.state) == [*whole, torn]
    assert "settled-runs.jsonl: dropped a torn last line" in daemon.log()
    assert "recovery read 1 of 3 runs (the rest settled)" in daemon.log()


async def test_a_run_a_kill_cut_off_after_the_list_was_made_is_interrupted_and_listed(
    tmp_path: Path, simulator: Simulator
) -> None:
    process = stalling_daemon(tmp_path, simulator)
    cut_off = await cut_off_by_a_kill(process, simulator)
    assert settled(process.state) == []

    process.start()
    async with await process.client() as client:
        (info,) = await client.runs_list()
    process.stop()
    assert (info.id, info.status) == (cut_off, "interrupted")
    assert settled(process.state) == [cut_off]


async def test_runs_ended_while_serving_are_listed_a_batch_at_a_time(tmp_path: Path) -> None:
    runs = FileRuns(tmp_path)
    await runs.recover(NOW)
    ended: list[str] = []

    async def finish(n: int) -> None:
        info = RunInfo(id=f"d-{n}", surface="direct", worker="ada", channel=None, created_at=NOW)
        await (await runs.create(info)).finish("done", NOW + 1)
        ended.append(info.id)

    async with anyio.create_task_group() as tg:
        for n in range(SETTLED_BATCH - 1):
            tg.start_soon(finish, n)
    assert settled(tmp_path) == []
    await finish(SETTLED_BATCH)
    assert sorted(settled(tmp_path)) == sorted(ended)
    # A start looks at none of them again: none is listed twice.
    assert await FileRuns(tmp_path).recover(NOW + 2) == 0
    assert sorted(settled(tmp_path)) == sorted(ended)


async def test_a_run_a_start_cannot_read_is_left_for_a_later_one_and_the_daemon_serves(
    daemon: DaemonProcess,
) -> None:
    async with await daemon.client() as client:
        good, bad = [(await client.run_direct("ada", text)).run for text in ("hi", "bye")]
    assert daemon.stop() == 0
    # A state from before the list, whose one run.json a hand edit broke.
    (daemon.state / "settled-runs.jsonl").unlink()
    (daemon.state / "runs" / bad / "run.json").write_text("{not json")

    daemon.start()
    async with await daemon.client() as client:
        listed = [r.id for r in await client.runs_list()]
    assert listed == [good]
    assert f"run {bad} cannot be read" in daemon.log()
    # Not listed settled: a start after the file is mended reads it again.
    assert settled(daemon.state) == [good]


async def test_a_session_a_pair_leads_to_that_cannot_be_read_ends_no_session_at_start(
    daemon: DaemonProcess,
) -> None:
    async with opened_session(daemon) as (client, session):
        await client.session_send(session, "hello")
    assert daemon.stop() == 0
    (daemon.state / "runs" / session / "run.json").write_text("")

    daemon.start()
    async with await daemon.client() as client:
        status = await client.daemon_status()
    assert daemon.process is not None and status.pid == daemon.process.pid
    assert f"a pair leads to run {session}, which cannot be read" in daemon.log()
    assert session not in settled(daemon.state)
