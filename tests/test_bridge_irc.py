"""The IRC bridge against a real IRC server (miniircd), with people in the
channels speaking through an IRC client library, a real daemon and the
provider simulator as the worker's engine."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import msgspec
import pytest
from harness import daemon_in_process
from ircd import IrcServer, heard, lines_from, user
from simulator import Reply, Simulator, write_org

from rosterd.bridge import BridgeConfig, IrcBridge, IrcLink, IrcMessage, reply_lines
from rosterd.client import RosterClient

pytestmark = pytest.mark.anyio

CHANNEL = "#general"


@pytest.fixture
def ircd() -> Iterator[IrcServer]:
    server = IrcServer().start()
    try:
        yield server
    finally:
        server.stop()


def _org(root: Path, sim: Simulator) -> Path:
    engine = f'kind = "openai"\nmodel = "sim-1"\nbase_url = "{sim.openai_url}"\nmax_retries = 0'
    write_org(root, workers=1, channels=1, identity_chars=300, purpose_chars=100, engine=engine)
    return root


def _config(socket: Path, server: IrcServer, **settings: object) -> BridgeConfig:
    base = BridgeConfig(
        socket=socket,
        host="127.0.0.1",
        port=server.port,
        nick="ada",
        worker="w0",
        channels={CHANNEL: "c0"},
        debounce_s=0.2,
        line_interval_s=0.0,
        operators=("op!*@*",),
        backoff_s=0.1,
    )
    return msgspec.structs.replace(base, **settings)


@asynccontextmanager
async def bridged(config: BridgeConfig) -> AsyncIterator[IrcBridge]:
    bridge = IrcBridge(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(bridge.run)
        with anyio.fail_after(20):
            await bridge.joined.wait()
        yield bridge
        tg.cancel_scope.cancel()


@asynccontextmanager
async def people(server: IrcServer, *nicks: str) -> AsyncIterator[list[IrcLink]]:
    links = [user(server, nick, CHANNEL) for nick in nicks]
    async with AsyncExitStack() as stack:
        for link in links:
            await stack.enter_async_context(link)
        with anyio.fail_after(20):
            for link in links:
                await link.joined()
        yield links


def _from_ada(message: IrcMessage) -> bool:
    return message.nick == "ada"


async def _session(client: RosterClient) -> str:
    return (await client.session_open("w0", "c0")).session


async def test_it_listens_to_everyone_and_answers_who_addresses_it(
    tmp_path: Path, ircd: IrcServer
) -> None:
    async with (
        Simulator() as sim,
        daemon_in_process(_org(tmp_path / "org", sim), tmp_path / "state") as daemon,
        bridged(_config(daemon.socket, ircd)),
        people(ircd, "alice", "bob", "carol") as (alice, bob, carol),
        await daemon.client() as client,
    ):
        alice.say(CHANNEL, "the build is green")
        bob.say(CHANNEL, "release is on friday")
        carol.say(CHANNEL, "ada: what did they say?")
        reply = await heard(carol, _from_ada)
        assert reply.target == CHANNEL and reply.text.startswith("carol: Reply ")
        sent = await client.runs_context(await _session(client))
        request = "\n".join(m.content for m in sent.turns[-1].messages)
        # The worker saw both others' lines, under their nicks, before the question.
        for said in ('"from":"alice"', "the build is green", '"from":"bob"', "release is on"):
            assert said in request
        assert request.index("release is on") < request.index("what did they say?")
        # Unaddressed lines got no answer: one request reached the provider.
        assert len(sim.requests) == 1


async def test_a_private_message_is_answered_privately(tmp_path: Path, ircd: IrcServer) -> None:
    async with (
        Simulator() as sim,
        daemon_in_process(_org(tmp_path / "org", sim), tmp_path / "state") as daemon,
        bridged(_config(daemon.socket, ircd)),
        people(ircd, "alice") as (alice,),
    ):
        alice.say("ada", "a word in private")
        reply = await heard(alice, _from_ada)
        assert reply.private and reply.text.startswith("Reply ")
        assert "a word in private" in sim.requests[0].body.decode()


async def test_quick_lines_are_one_turn_and_reply_all_answers_every_line(
    tmp_path: Path, ircd: IrcServer
) -> None:
    async with (
        Simulator() as sim,
        daemon_in_process(_org(tmp_path / "org", sim), tmp_path / "state") as daemon,
        bridged(_config(daemon.socket, ircd, debounce_s=1.0)),
        people(ircd, "alice") as (alice,),
        await daemon.client() as client,
    ):
        alice.say(CHANNEL, "first, the logs")
        alice.say(CHANNEL, "then the metrics")
        alice.say(CHANNEL, "@ada which one broke?")
        await heard(alice, _from_ada)
        shown = await client.runs_show(await _session(client))
    turns = [e for e in shown.transcript if e.role == "user"]
    assert len(turns) == 1 and len(sim.requests) == 1
    for line in ("first, the logs", "then the metrics", "@ada which one broke?"):
        assert json.dumps(line)[1:-1] in turns[0].content


async def test_reply_all_answers_a_line_that_names_nobody(tmp_path: Path, ircd: IrcServer) -> None:
    async with (
        Simulator() as sim,
        daemon_in_process(_org(tmp_path / "org", sim), tmp_path / "state") as daemon,
        bridged(_config(daemon.socket, ircd, reply={CHANNEL: "all"})),
        people(ircd, "alice") as (alice,),
    ):
        alice.say(CHANNEL, "anyone around?")
        assert (await heard(alice, _from_ada)).text.startswith("alice: ")


LONG = "\n".join(
    f"Paragraph {n}: naïve café déjà vu — 日本語のテキスト {'ünïcödé ' * 40}\r\x00 end"
    for n in range(9)
)


async def test_a_long_reply_fits_irc_lines_comes_line_by_line_and_is_cut_with_a_pointer(
    tmp_path: Path, ircd: IrcServer
) -> None:
    assert len(LONG) > 3000
    async with (
        Simulator() as sim,
        daemon_in_process(_org(tmp_path / "org", sim), tmp_path / "state") as daemon,
        bridged(_config(daemon.socket, ircd, max_lines=40, line_interval_s=0.05)) as bridge,
        people(ircd, "alice") as (alice,),
    ):
        sim.script(Reply(LONG))
        alice.say(CHANNEL, "ada: tell me everything")
        assert bridge._link is not None
        budget = bridge._link.line_budget(CHANNEL)
        expected = reply_lines("alice: " + LONG, budget, 40, "")
        got = await lines_from(alice, "ada", len(expected))
        texts = [m.text for _, m in got]
        assert all(len(t.encode()) <= budget for t in texts)
        assert not any(c in t for t in texts for c in "\r\n\x00")
        # Every word arrives, in order, split only between lines.
        words = " ".join(LONG.replace("\x00", " ").split())
        assert " ".join(" ".join(texts).removeprefix("alice: ").split()) == words
        # Line by line, one per interval: never faster than the flood limit.
        gaps = [b - a for (a, _), (b, _) in itertools.pairwise(got)]
        assert min(gaps) >= 0.04


async def test_past_max_lines_the_last_line_says_where_the_rest_is(
    tmp_path: Path, ircd: IrcServer
) -> None:
    async with (
        Simulator() as sim,
        daemon_in_process(_org(tmp_path / "org", sim), tmp_path / "state") as daemon,
        bridged(_config(daemon.socket, ircd, max_lines=3)),
        people(ircd, "bob") as (bob,),
    ):
        sim.script(Reply("\n".join(f"line {n}" for n in range(10))), Reply("one\ntwo\nthree"))
        bob.say(CHANNEL, "ada: and now?")
        cut = [m.text for _, m in await lines_from(bob, "ada", 3)]
        assert cut[:2] == ["bob: line 0", "line 1"]
        assert cut[2].startswith("… (the rest: roster server runs show s-")
        # Exactly max_lines lines are said whole.
        bob.say(CHANNEL, "ada: count to three")
        whole = [m.text for _, m in await lines_from(bob, "ada", 3)]
        assert whole == ["bob: one", "two", "three"]
