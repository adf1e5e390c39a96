"""The conversation holds the whole channel: what others posted since the last turn.

Over the real socket, with the loopback provider simulator recording every
request the daemon made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from harness import Cli, DaemonProcess, opened_session, process_client, set_engine
from orgs import simulated_engine
from simulator import Simulator

from rosterd.client import RosterClient
from rosterd.protocol import TurnResult


@pytest.fixture
def org(org_dir: Path, simulator: Simulator) -> Path:
    """The example org on *simulator*'s OpenAI API, without retries."""
    set_engine(org_dir, simulated_engine(simulator, settings="max_retries = 0"))
    return org_dir


def last_input(body: bytes) -> list[dict[str, Any]]:
    """The envelopes of a request's newest user turn."""
    content = msgspec.json.decode(body)["messages"][-1]["content"]
    return [msgspec.json.decode(line) for line in content.splitlines()]


def said(envelopes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["from"], e["text"]) for e in envelopes if e["block"] == "message" and "text" in e]


async def send(client: RosterClient, session: str, text: str, sender: str) -> TurnResult:
    return await client.session_send(session, text, sender)


@pytest.mark.anyio
async def test_posts_between_turns_reach_the_next_turn_once_before_the_message(
    org: Path, tmp_path: Path, simulator: Simulator
) -> None:
    async with (
        process_client(org, tmp_path / "state") as (process, client),
        await process.client() as other,
    ):
        ada = (await client.session_open("ada", "general")).session
        grace = (await other.session_open("grace", "general")).session
        await send(client, ada, "first", "alice")
        posted = await other.channel_post("general", "bob", "deploy is red")
        # Another worker's exchange, from another frontend.
        grace_reply = (await send(other, grace, "grace, look at CI", "carol")).text
        await send(client, ada, "second", "alice")
        await send(client, ada, "third", "alice")
        shown = await client.runs_show(ada)

    first, _, second, third = simulator.bodies()
    assert said(last_input(first)) == [("alice", "first")]
    assert said(last_input(second)) == [
        ("bob", "deploy is red"),
        ("carol", "grace, look at CI"),
        ("grace", grace_reply),
        ("alice", "second"),
    ]
    # Each envelope carries when it was posted; the new message comes last.
    envelopes = [e for e in last_input(second) if e["block"] == "message"]
    assert all(e["at"].endswith("Z") for e in envelopes)
    assert envelopes[-1]["text"] == "second"
    # Once: turn 3 carries nothing new, and nothing is ever said twice.
    assert said(last_input(third)) == [("alice", "third")]
    whole = msgspec.json.decode(third)["messages"]
    assert sum("deploy is red" in m["content"] for m in whole) == 1
    assert sum('"text":"first"' in m["content"] for m in whole) == 1

    turns = [r for r in shown.records if r.kind == "turn"]
    backlog = [next(b for b in r.blocks if b.block == "backlog") for r in turns]
    assert [(b.status, b.items, b.omitted) for b in backlog] == [
        ("absent", 0, 0),
        ("included", 3, 0),
        ("absent", 0, 0),
    ]
    budget = turns[1].budget
    assert budget is not None and budget.backlog == backlog[1].rendered_chars > 0
    assert posted.seq >= 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("context", "kept"),
    [("backlog = 1000", None), ("backlog_messages = 5", 5)],
)
async def test_a_long_backlog_keeps_the_newest_that_fit_and_counts_the_rest(
    org: Path, tmp_path: Path, simulator: Simulator, cli: Cli, context: str, kept: int | None
) -> None:
    toml = org / "org.toml"
    toml.write_text(toml.read_text().replace("[context]\n", f"[context]\n{context}\n"))
    state = tmp_path / "state"
    async with process_client(org, state) as (_, client):
        ada = (await client.session_open("ada", "releases")).session
        await send(client, ada, "before", "alice")
        for n in range(1, 41):
            await client.channel_post("releases", "bob", f"post {n:02d} " + "x" * 20)
        await send(client, ada, "after", "alice")
        shown = await client.runs_show(ada)

    envelopes = [e for e in last_input(simulator.bodies()[-1]) if e["block"] == "message"]
    note, *posts, message = envelopes
    assert message["text"] == "after"
    texts = [e["text"] for e in posts]
    assert texts == [f"post {n:02d} " + "x" * 20 for n in range(41 - len(texts), 41)]
    assert note == {"block": "message", "omitted": 40 - len(texts)}
    block = next(b for b in shown.records[-1].blocks if b.block == "backlog")
    assert (block.status, block.items, block.omitted) == (
        "shrunk",
        len(texts),
        40 - len(texts),
    )
    if kept is not None:
        assert len(texts) == kept
    else:
        assert block.limit == 1000 >= block.rendered_chars
        # The newest that fit: one more would not have.
        assert block.rendered_chars + len(msgspec.json.encode(posts[0])) + 1 > 1000
        assert 5 < len(texts) < 40

    out = await cli.in_thread("server", "runs", "show", ada, "--state", str(state))
    assert f"kept {len(texts)} of 40: oldest messages dropped to fit" in out
    assert f"backlog {block.rendered_chars}/{block.limit}" in out


@pytest.mark.anyio
async def test_a_resumed_session_continues_the_backlog_where_it_stopped(
    org: Path, tmp_path: Path, simulator: Simulator
) -> None:
    with DaemonProcess(org, tmp_path / "state").start() as daemon:
        async with opened_session(daemon) as (client, ada):
            await send(client, ada, "first", "alice")
            await client.channel_post("general", "bob", "ping")
        daemon.restart()
        async with opened_session(daemon) as (client, reopened):
            assert reopened == ada
            await send(client, ada, "second", "alice")
    assert said(last_input(simulator.bodies()[-1])) == [("bob", "ping"), ("alice", "second")]
