"""Warm sessions through the real daemon over its real socket."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psycopg
import pytest
from anyio.abc import TaskGroup
from harness import (
    DaemonProcess,
    InProcessDaemon,
    ManualClock,
    in_process_client,
    opened_session,
    process_client,
    set_daemon,
)

from rosterd.client import RosterClient, RpcError
from rosterd.protocol import Closed, DaemonStatus, Delta, RunShown, RunsShow, Wait

pytestmark = pytest.mark.anyio


def context_records(state: Path, run: str) -> list[dict[str, Any]]:
    path = state / "runs" / run / "context.jsonl"
    return [msgspec.json.decode(line) for line in path.read_bytes().splitlines()]


def input_lines(record: dict[str, Any]) -> list[dict[str, Any]]:
    lines = []
    for block in record["blocks"]:
        lines += [msgspec.json.decode(line) for line in block["content"].splitlines()]
    return lines


async def open_session(client: RosterClient, worker: str = "ada", channel: str = "general") -> str:
    return (await client.session_open(worker, channel)).session


async def session_after_hello(client: RosterClient) -> str:
    """A session of ada in general that had one turn."""
    session = await open_session(client)
    await client.session_send(session, "hello")
    return session


async def test_turns_stream_deltas_and_are_traced_before_the_reply(served: InProcessDaemon) -> None:
    async with opened_session(served) as (client, session):
        deltas: list[str] = []
        waits: list[Wait] = []

        async def on_delta(delta: Delta) -> None:
            assert delta.run == session
            deltas.append(delta.text)

        async def on_wait(wait: Wait) -> None:
            waits.append(wait)

        result = await client.session_send(session, "hi ada", on_delta=on_delta, on_wait=on_wait)
    # Deltas are the only notifications the turn sends.
    assert waits == []
    assert "".join(deltas) == result.text
    assert "You said: hi ada" in result.text
    records = context_records(served.state, session)
    assert [r["kind"] for r in records] == ["system", "turn"]
    assert records[1]["status"] == "ok"
    assert records[1]["system_sha256"] == records[0]["system_sha256"]


async def test_two_frontends_share_one_session(served: InProcessDaemon) -> None:
    async with await served.client() as first, await served.client() as second:
        one = await open_session(first)
        two = await open_session(second)
        assert one == two
        await first.session_send(one, "from the first")
        result = await second.session_send(one, "from the second")
    assert result.turn == 2


async def test_memory_added_after_turn_3_appears_in_turn_4_only(served: InProcessDaemon) -> None:
    async with opened_session(served) as (client, session):
        for n in range(1, 4):
            await client.session_send(session, f"turn {n}")
        await client.memory_add("ada", "the deploy key rotates on Fridays")
        await client.session_send(session, "turn 4")
    turns = [r for r in context_records(served.state, session) if r["kind"] == "turn"]
    memory = [[line for line in input_lines(r) if line["block"] == "memory"] for r in turns]
    assert memory[:3] == [[], [], []]
    assert [m["text"] for m in memory[3]] == ["the deploy key rotates on Fridays"]


async def test_gates_filed_or_resolved_between_turns_are_in_the_next_briefing(
    served: InProcessDaemon,
) -> None:
    async with opened_session(served) as (client, session):
        await client.session_send(session, "before")
        gate = await client.gate_file("ada", "ship 1.4 today?", channel="general")
        await client.session_send(session, "after filing")
        await client.gate_resolve(gate.id, "approved")
        await client.session_send(session, "after resolving")
        await client.session_send(session, "and later")
    turns = [r for r in context_records(served.state, session) if r["kind"] == "turn"]
    briefings = [[x for x in input_lines(r) if x["block"] == "briefing"] for r in turns]
    assert briefings[0] == []
    assert briefings[1] == [
        {"block": "briefing", "kind": "gate", "gate": gate.id, "summary": "ship 1.4 today?"}
    ]
    assert briefings[2] == [
        {
            "block": "briefing",
            "kind": "resolved",
            "gate": gate.id,
            "summary": "ship 1.4 today?",
            "outcome": "approved",
            "note": "",
        }
    ]
    assert briefings[3] == []


async def test_identity_edit_applies_to_the_next_session_only(
    served: InProcessDaemon, org_dir: Path
) -> None:
    identity = org_dir / "workers" / "ada" / "identity.md"
    async with opened_session(served) as (client, session):
        await client.session_send(session, "one")
        identity.write_text(identity.read_text() + "\nNew rule: answer in haiku.\n")
        again = await open_session(client)
        assert again == session
        await client.session_send(session, "two")
        records = context_records(served.state, session)
        assert {r["system_sha256"] for r in records} == {records[0]["system_sha256"]}
        await client.session_close(session)
        fresh = await open_session(client)
        assert fresh != session
    system = context_records(served.state, fresh)[0]
    identity_block = next(b for b in system["blocks"] if b["block"] == "identity")
    assert "answer in haiku" in identity_block["content"]
    assert system["system_sha256"] != records[0]["system_sha256"]


async def test_oversized_identity_fails_open_with_1001_and_a_failed_trace(
    org_dir: Path, tmp_path: Path
) -> None:
    (org_dir / "workers" / "ada" / "identity.md").write_text("x" * 12001)
    async with process_client(org_dir, tmp_path / "state") as (process, client):
        with pytest.raises(RpcError) as failure:
            await open_session(client)
    error = failure.value
    assert error.code == 1001
    assert error.data["block"] == "identity"
    assert error.data["size"] > 12000
    assert error.data["limit"] == 12000
    assert "identity" in str(error)
    (record,) = context_records(process.state, error.data["run"])
    assert record["status"] == "failed"
    assert record["error"]["block"] == "identity"
    transcript = process.state / "runs" / error.data["run"] / "transcript.jsonl"
    assert not transcript.exists() or transcript.read_bytes() == b""


async def test_oversized_message_fails_the_turn_and_loses_nothing(served: InProcessDaemon) -> None:
    async with opened_session(served) as (client, session):
        await client.session_send(session, "fine")
        with pytest.raises(RpcError) as failure:
            await client.session_send(session, "x" * 24001)
        assert failure.value.code == 1001
        assert failure.value.data["block"] == "message"
        result = await client.session_send(session, "still here")
    assert result.turn == 3
    records = context_records(served.state, session)
    kinds = [(r["kind"], r["turn"], r["status"]) for r in records]
    assert kinds == [
        ("system", 0, "ok"),
        ("turn", 1, "ok"),
        ("turn", 2, "failed"),
        ("turn", 3, "ok"),
    ]


async def test_restart_resumes_the_same_session_with_the_same_bytes(
    daemon: DaemonProcess,
) -> None:
    async with opened_session(daemon) as (client, session):
        await client.session_send(session, "remember me")
    system = daemon.state / "runs" / session / "system.json"
    system_before = system.read_bytes()
    daemon.restart()
    async with await daemon.client() as client:
        opened = await client.session_open("ada", "general")
        assert opened.session == session
        assert opened.turns == 1
        result = await client.session_send(session, "again")
    assert result.turn == 2
    assert "transcript 3 messages" in result.text
    assert system.read_bytes() == system_before


async def test_idle_sessions_expire_at_their_limit_exactly(org_dir: Path, tmp_path: Path) -> None:
    clock = ManualClock()
    state = tmp_path / "state"
    async with in_process_client(org_dir, state, clock=clock) as (_, client):
        session = await session_after_hello(client)
        clock.advance(899.9)
        kept = await client.session_send(session, "in time")
        clock.advance(900)
        with pytest.raises(RpcError) as failure:
            await client.session_send(session, "too late")
        assert failure.value.code == 1004
        fresh = await open_session(client)
    assert kept.turn == 2
    assert fresh != session
    info = msgspec.json.decode((state / "runs" / session / "run.json").read_bytes())
    assert info["status"] == "expired"


@dataclass
class HeldEnd:
    """A daemon on PostgreSQL whose session of ada in general had one turn,
    with a connection of the test's own that can hold the session's end:
    its final write waits for the run's row."""

    daemon: InProcessDaemon
    client: RosterClient
    session: str
    row: psycopg.AsyncConnection[Any]
    reopened: list[str] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)

    async def during(
        self,
        end: Callable[[], Coroutine[Any, Any, None]],
        ending: str,
        *meanwhile: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        """Run *end*, which ends the session, its final write held until
        each of *meanwhile*, started once the daemon logged *ending*, waits
        for that end under way."""
        await self.row.execute("SELECT FROM runs WHERE id = %s FOR UPDATE", (self.session,))
        async with anyio.create_task_group() as tg:
            tg.start_soon(end)
            await self.daemon.logged(ending)
            for call in meanwhile:
                tg.start_soon(call)
            waits = f"session {self.session}: waits for its end under way"
            await self.daemon.logged(waits, len(meanwhile))
            await self.row.rollback()

    async def reopen(self) -> None:
        """Open the pair from a client of its own."""
        async with await self.daemon.client() as opener:
            self.reopened.append(await open_session(opener))

    async def send_too_late(self) -> None:
        await self._refused(lambda client: client.session_send(self.session, "too late"))

    async def close_too_late(self) -> None:
        await self._refused(lambda client: client.session_close(self.session))

    async def _refused(self, request: Callable[[RosterClient], Awaitable[object]]) -> None:
        """Make *request* of the session from a client of its own, which is refused."""
        async with await self.daemon.client() as client:
            with pytest.raises(RpcError) as failure:
                await request(client)
        self.refused.append(failure.value.code)


@asynccontextmanager
async def held_end(
    org_dir: Path, tmp_path: Path, postgres_url: str, clock: ManualClock
) -> AsyncIterator[HeldEnd]:
    async with (
        in_process_client(org_dir, tmp_path / "state", clock=clock, database=postgres_url) as (
            daemon,
            client,
        ),
        await psycopg.AsyncConnection.connect(postgres_url) as row,
    ):
        yield HeldEnd(daemon, client, await session_after_hello(client), row)


async def test_an_open_while_a_send_expires_the_session_waits_and_gets_a_fresh_one(
    org_dir: Path, tmp_path: Path, postgres_url: str
) -> None:
    clock = ManualClock()
    async with held_end(org_dir, tmp_path, postgres_url, clock) as held:
        # The reaper's round comes while the session is not yet idle long
        # enough, and the next is seconds away: the send below expires it.
        clock.advance(899)
        with anyio.fail_after(10):
            await clock.settled()
        clock.advance(1)
        expired = f"session {held.session} expired after"
        await held.during(held.send_too_late, expired, held.reopen)
        (fresh,) = held.reopened
        result = await held.client.session_send(fresh, "again")
    assert held.refused == [1004]
    assert fresh != held.session
    assert (result.run, result.turn) == (fresh, 1)


async def test_an_open_send_or_close_while_a_close_is_under_way_waits_for_it(
    org_dir: Path, tmp_path: Path, postgres_url: str
) -> None:
    # The open got the session being closed, so the send after it got 1004.
    async with held_end(org_dir, tmp_path, postgres_url, ManualClock()) as held:
        closed: list[Closed] = []

        async def close() -> None:
            closed.append(await held.client.session_close(held.session))

        closing = f"session {held.session}: ending as closed"
        await held.during(close, closing, held.reopen, held.send_too_late, held.close_too_late)
        (fresh,) = held.reopened
        result = await held.client.session_send(fresh, "again")
    assert closed == [Closed(closed=held.session)]
    assert held.refused == [1004, 1004]
    assert fresh != held.session
    assert (result.run, result.turn) == (fresh, 1)


async def close_behind_turns_then_reopen(
    held: HeldEnd, tg: TaskGroup, turns: list[int], closed: list[Closed]
) -> None:
    """With the session's row held: a turn waiting at its first write and
    one queued behind it, a close behind both, then an open of the pair,
    each started once the one before it is logged waiting."""

    async def send(text: str) -> None:
        async with await held.daemon.client() as client:
            turns.append((await client.session_send(held.session, text)).turn)

    async def close() -> None:
        closed.append(await held.client.session_close(held.session))

    waiting = f"session {held.session}: a"
    await held.row.execute("SELECT FROM runs WHERE id = %s FOR UPDATE", (held.session,))
    tg.start_soon(send, "first")
    tg.start_soon(send, "second")
    await held.daemon.logged(f"{waiting} turn waits for the turn under way")
    tg.start_soon(close)
    await held.daemon.logged(f"{waiting} close waits for the turn under way")
    tg.start_soon(held.reopen)
    await held.daemon.logged(f"session {held.session}: waits for its end under way")


async def test_an_open_while_a_close_waits_for_a_turn_waits_for_both_and_gets_a_fresh_one(
    org_dir: Path, tmp_path: Path, postgres_url: str
) -> None:
    # The open got the session the close was waiting to end, so the send
    # after it got 1004.
    async with held_end(org_dir, tmp_path, postgres_url, ManualClock()) as held:
        turns: list[int] = []
        closed: list[Closed] = []
        async with anyio.create_task_group() as tg:
            await close_behind_turns_then_reopen(held, tg, turns, closed)
            await held.row.rollback()
        (fresh,) = held.reopened
        result = await held.client.session_send(fresh, "again")
    assert sorted(turns) == [2, 3]
    assert closed == [Closed(closed=held.session)]
    assert fresh != held.session
    assert (result.run, result.turn) == (fresh, 1)


async def test_an_open_of_another_pair_goes_on_while_a_close_waits_for_a_turn(
    org_dir: Path, tmp_path: Path, postgres_url: str
) -> None:
    async with (
        held_end(org_dir, tmp_path, postgres_url, ManualClock()) as held,
        anyio.create_task_group() as tg,
    ):
        await close_behind_turns_then_reopen(held, tg, [], [])
        # The open lock is not held through that open's wait.
        with anyio.fail_after(10):
            async with await held.daemon.client() as other:
                elsewhere = await open_session(other, channel="releases")
        await held.row.rollback()
    assert elsewhere != held.session


async def test_the_reaper_expires_other_sessions_while_a_close_waits_for_a_turn(
    org_dir: Path, tmp_path: Path, postgres_url: str
) -> None:
    # Idle limit short of the leases' renewal, which the held row would stop.
    set_daemon(org_dir, "session_idle_s = 2")
    clock = ManualClock()
    async with (
        held_end(org_dir, tmp_path, postgres_url, clock) as held,
        await held.daemon.client() as client,
    ):
        idle = await open_session(client, channel="releases")
        await client.session_send(idle, "hello")
        async with anyio.create_task_group() as tg:
            await close_behind_turns_then_reopen(held, tg, [], [])
            # The reaper's round wakes, expires the idle session and sleeps
            # again, not waiting for the turns the close waits for.
            clock.advance(2)
            with anyio.fail_after(10):
                await clock.settled()
            with pytest.raises(RpcError) as expired:
                await client.session_send(idle, "too late")
            await held.row.rollback()
    assert expired.value.code == 1004


async def test_the_reaper_expires_sessions_no_one_touches(org_dir: Path, tmp_path: Path) -> None:
    set_daemon(org_dir, "session_idle_s = 0.4")
    clock = ManualClock()
    async with in_process_client(org_dir, tmp_path / "state", clock=clock) as (_, client):
        session = await session_after_hello(client)
        # The reaper sleeps on the daemon's clock: moving it wakes the reaper,
        # which expires the session and goes back to sleep.
        clock.advance(0.4)
        with anyio.fail_after(10):
            await clock.settled()
        status = await client.request(DaemonStatus())
    assert status.sessions == 0
    info = msgspec.json.decode((tmp_path / "state" / "runs" / session / "run.json").read_bytes())
    assert info["status"] == "expired"


async def test_an_idle_session_is_not_reopened_but_replaced(org_dir: Path, tmp_path: Path) -> None:
    clock = ManualClock()
    async with in_process_client(org_dir, tmp_path / "state", clock=clock) as (_, client):
        session = await session_after_hello(client)
        clock.advance(900)
        fresh = await open_session(client)
        result = await client.session_send(fresh, "again")
    assert fresh != session
    assert result.turn == 1


async def test_a_failed_last_turn_keeps_its_number_across_a_restart(
    daemon: DaemonProcess,
) -> None:
    async with opened_session(daemon) as (client, session):
        await client.session_send(session, "fine")
        with pytest.raises(RpcError):
            await client.session_send(session, "x" * 24001)
    daemon.restart()
    async with opened_session(daemon) as (client, reopened):
        assert reopened == session
        result = await client.session_send(session, "again")
    assert result.turn == 3
    turns = [r["turn"] for r in context_records(daemon.state, session) if r["kind"] == "turn"]
    assert turns == [1, 2, 3]


async def test_a_session_that_expired_while_the_daemon_was_down_is_not_resumed(
    org_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rosterd")
    clock = ManualClock()
    state = tmp_path / "state"
    async with in_process_client(org_dir, state, clock=clock) as (_, client):
        session = await session_after_hello(client)
    clock.advance(900)
    async with in_process_client(org_dir, state, clock=clock) as (_, client):
        fresh = await open_session(client)
    assert fresh != session
    info = msgspec.json.decode((state / "runs" / session / "run.json").read_bytes())
    assert info["status"] == "expired"
    assert "had expired while no host served it" in caplog.text


async def test_runs_show_with_wait_answers_once_the_run_ends(served: InProcessDaemon) -> None:
    async with await served.client() as watcher, opened_session(served) as (client, session):
        await client.session_send(session, "hello")
        ended: list[RunShown] = []

        async def wait_for_the_end() -> None:
            ended.append(await watcher.request(RunsShow(session, wait=30)))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_for_the_end)
                await client.session_close(session)
    (shown,) = ended
    assert shown.info.status == "closed"
    assert [entry.role for entry in shown.transcript] == ["user", "assistant"]


async def test_a_wait_for_a_run_that_stays_open_ends_with_its_time(
    served: InProcessDaemon,
) -> None:
    async with opened_session(served) as (client, session):
        with anyio.fail_after(10):
            shown = await client.request(RunsShow(session, wait=0.2))
    assert shown.info.status == "open"
