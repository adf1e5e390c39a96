"""A session never dies of its own length: it rolls over, over the real socket.

The provider is the loopback simulator (OpenAI-compatible), so every request
the daemon made is recorded byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from harness import Cli, InProcessDaemon, in_process_client, process_client
from orgs import simulated_engine, write_org
from simulator import Held, Simulator, Status

from rosterd.client import RosterClient, RpcError
from rosterd.compiler import RunMeta, compile_system
from rosterd.org import Surface, load_org
from rosterd.protocol import TurnResult

TOO_LONG = Status(
    400,
    "This model's maximum context length is 8192 tokens. However, your messages "
    "resulted in 9001 tokens. Please reduce the length of the messages.",
    code="context_length_exceeded",
)


def openai_org(root: Path, simulator: Simulator, context: str = "") -> Path:
    """Worker ada in c0 on *simulator*'s OpenAI API without retries, with
    the ``[context]`` keys *context* (written again over an org written before)."""
    engine = simulated_engine(simulator, settings="max_retries = 0")
    sections = f"[context]\n{context}" if context else ""
    return write_org(root, workers=["ada"], engine=engine, sections=sections)


@pytest.fixture
def org(tmp_path: Path, simulator: Simulator) -> Path:
    """:func:`openai_org` in the test's directory, on the test's simulator."""
    return openai_org(tmp_path / "org", simulator)


def system_chars(org: Path) -> int:
    loaded = load_org(org)
    scope = loaded.scope(Surface.SESSION, "ada", "c0")
    return len(compile_system(loaded, scope, RunMeta(run="t", turn=0, now=0.0)).text)


def messages(body: bytes) -> list[dict[str, str]]:
    decoded: list[dict[str, str]] = msgspec.json.decode(body)["messages"]
    return decoded


def request_chars(body: bytes) -> int:
    return sum(len(m["content"]) for m in messages(body))


def lines(content: str) -> list[dict[str, Any]]:
    return [msgspec.json.decode(line) for line in content.splitlines()]


def run_info(state: Path, run: str) -> dict[str, Any]:
    info: dict[str, Any] = msgspec.json.decode((state / "runs" / run / "run.json").read_bytes())
    return info


@pytest.mark.anyio
async def test_a_session_past_session_chars_rolls_over_and_the_call_succeeds(
    tmp_path: Path, simulator: Simulator, org: Path, cli: Cli
) -> None:
    limit = system_chars(org) + 900
    # A short history, so the new session's first turn leaves room for more.
    openai_org(org, simulator, f"session_chars = {limit}\nhistory_messages = 2")
    state = tmp_path / "state"
    results: list[TurnResult] = []
    async with process_client(org, state) as (_, client):
        opened = await client.session_open("ada", "c0")
        old = opened.session
        (org / "workers" / "ada" / "identity.md").write_text("You are Ada, now terse.\n")
        for n in range(12):
            result = await client.session_send(old, f"q{n}")
            results.append(result)
            if result.rolled_from is not None:
                break
        # The old id keeps working: it names the session that took over.
        after = await client.session_send(old, "and now?")
        status = await client.daemon_status()

    rolled = results[-1]
    new = rolled.run
    assert rolled.rolled_from == old and new != old
    assert rolled.turn == 1
    assert all(r.rolled_from is None and r.run == old for r in results[:-1])
    assert (after.run, after.turn, after.rolled_from) == (new, 2, None)
    assert status.sessions == 1

    bodies = simulator.bodies()
    assert len(bodies) == len(results) + 1
    old_bodies, first_new = bodies[: len(results) - 1], bodies[len(results) - 1]
    # Every request of the old session fit, and the next one would not have:
    # the last request, its reply and the new message line.
    assert all(request_chars(body) <= limit for body in old_bodies)
    new_message = lines(messages(first_new)[-1]["content"])[-1]
    assert new_message["block"] == "message" and new_message["text"] == f"q{len(results) - 1}"
    would_be = (
        request_chars(old_bodies[-1])
        + len(results[-2].text)
        + len(msgspec.json.encode(new_message)) + 1
    )  # fmt: skip
    assert would_be > limit
    assert len(results) > 2

    # The new session: the edited identity, and the conversation as history.
    system, user = messages(first_new)
    assert "You are Ada, now terse." in system["content"]
    assert "You are Ada, now terse." not in messages(old_bodies[-1])[0]["content"]
    history = [e for e in lines(user["content"]) if e["block"] == "history"]
    assert [(e["from"], e["text"]) for e in history] == [
        ("operator", f"q{len(results) - 2}"),
        ("ada", results[-2].text),
    ]

    old_info, new_info = run_info(state, old), run_info(state, new)
    assert old_info["status"] == "rolled-over"
    assert old_info["rolled_to"] == new and new_info["rolled_from"] == old
    assert "over session_chars" in old_info["rollover"]
    record = msgspec.json.decode(
        (state / "runs" / new / "context.jsonl").read_bytes().splitlines()[0]
    )
    assert record["rollover"]["previous"] == old

    # The CLI reads the state directory with the daemon down, in its own loop.
    shown_old = await cli.in_thread("server", "runs", "show", old, "--state", str(state))
    assert f"rolled over to {new}" in shown_old
    shown = await cli.in_thread("server", "runs", "show", new, "--state", str(state))
    assert f"rolled over from {old}" in shown
    assert f"continues session {old}" in shown


def sender(
    daemon: InProcessDaemon, session: str, results: dict[str, TurnResult]
) -> Callable[[str], Coroutine[Any, Any, None]]:
    """Sends a text as a turn of *session* from a frontend of its own; the
    result goes to *results* under the text."""

    async def send(text: str) -> None:
        async with await daemon.client() as frontend:
            results[text] = await frontend.session_send(session, text)

    return send


async def rolled_over(client: RosterClient, simulator: Simulator) -> tuple[str, TurnResult]:
    """A session of ada in c0 whose second turn the provider refuses as too
    long: the session, and the turn its successor answered."""
    old = (await client.session_open("ada", "c0")).session
    await client.session_send(old, "one")
    simulator.script(TOO_LONG)
    return old, await client.session_send(old, "two")


@pytest.mark.anyio
async def test_a_provider_length_refusal_rolls_over_exactly_once_per_turn(
    tmp_path: Path, simulator: Simulator, org: Path
) -> None:
    state = tmp_path / "state"
    async with process_client(org, state) as (_, client):
        first, rolled = await rolled_over(client, simulator)
        second = rolled.run
        sent_before = len(simulator.requests)
        after = await client.session_send(second, "three")
        # Refused again, and the fresh session refused too: one rollover,
        # then a clear error; the daemon does not loop.
        simulator.script(TOO_LONG, TOO_LONG)
        with pytest.raises(RpcError) as failure:
            await client.session_send(second, "four")
        refused = len(simulator.requests)

    assert rolled.rolled_from == first and second != first and rolled.turn == 1
    assert after.run == second and after.turn == 2
    bodies = simulator.bodies()
    assert sent_before == 3 and refused == sent_before + 1 + 2
    assert failure.value.code == 1002
    assert "maximum context length" in str(failure.value)

    # The refused turn went to the new session whole, once.
    refused_two, answered_two = messages(bodies[1]), messages(bodies[2])
    assert lines(refused_two[-1]["content"])[-1]["text"] == "two"
    assert len(answered_two) == 2
    first_turn = lines(answered_two[1]["content"])
    assert next(e["text"] for e in first_turn if e["block"] == "history") == "one"
    assert first_turn[-1]["text"] == "two"
    # It is not sent again in the new session's later turns.
    three = messages(bodies[3])
    assert three[:2] == answered_two
    assert sum('"text":"two"' in m["content"] for m in three) == 1

    info = run_info(state, first)
    assert info["status"] == "rolled-over" and info["rolled_to"] == second
    assert "too long" in info["rollover"]
    assert run_info(state, second)["status"] == "rolled-over"


@pytest.mark.anyio
async def test_turns_queued_behind_a_rollover_are_answered_by_the_new_session(
    tmp_path: Path, simulator: Simulator, org: Path
) -> None:
    limit = system_chars(org) + 700
    openai_org(org, simulator, f"session_chars = {limit}")
    results: dict[int, TurnResult] = {}
    async with process_client(org, tmp_path / "state") as (process, opener):
        old = (await opener.session_open("ada", "c0")).session

        async def frontend(n: int) -> None:
            async with await process.client() as client:
                results[n] = await client.session_send(old, f"from frontend {n}")

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(frontend, n)
    rolled = [r for r in results.values() if r.rolled_from is not None]
    assert len(rolled) >= 1 and all(r.rolled_from != r.run for r in rolled)
    # Each session numbers its turns 1, 2, ... with none lost or repeated.
    by_run: dict[str, list[int]] = {}
    for result in results.values():
        by_run.setdefault(result.run, []).append(result.turn)
    assert old in by_run and len(by_run) == len(rolled) + 1
    for turns in by_run.values():
        assert sorted(turns) == list(range(1, len(turns) + 1))
    assert len(simulator.requests) == 8


@pytest.mark.anyio
async def test_turns_waiting_through_a_rollover_keep_their_order_against_later_ones(
    tmp_path: Path, simulator: Simulator, org: Path
) -> None:
    waits = "a turn waits for the turn under way"
    results: dict[str, TurnResult] = {}
    async with in_process_client(org, tmp_path / "state") as (daemon, client):
        old = (await client.session_open("ada", "c0")).session
        await client.session_send(old, "one")
        # x is held at the provider while a and b wait; a is refused as too
        # long and answered by a new session, held while c comes (by the
        # old id, which now names the new session).
        simulator.script(Held("x"), TOO_LONG, Held("rolled"))
        send = sender(daemon, old, results)
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "x")
            await simulator.wait_for_requests(2)
            for waiting, text in enumerate("ab", start=1):
                tg.start_soon(send, text)
                await daemon.logged(waits, waiting)
            simulator.release("x")
            await simulator.wait_for_requests(4)
            tg.start_soon(send, "c")
            await daemon.logged(waits, 3)
            simulator.release("rolled")
    said = [lines(messages(body)[-1]["content"])[-1]["text"] for body in simulator.bodies()]
    assert said == ["one", "x", "a", "a", "b", "c"]
    new = results["a"].run
    assert (results["x"].run, results["x"].turn) == (old, 2)
    assert results["a"].rolled_from == old and new != old
    assert [(results[t].run, results[t].turn) for t in "abc"] == [(new, 1), (new, 2), (new, 3)]


@pytest.mark.anyio
async def test_a_close_that_waited_through_a_rollover_closes_and_forgets_the_new_session(
    tmp_path: Path, simulator: Simulator, org: Path
) -> None:
    async with in_process_client(org, tmp_path / "state") as (daemon, client):
        old = (await client.session_open("ada", "c0")).session
        await client.session_send(old, "one")
        # x is held while a waits and the close of the old id comes; a is
        # refused as too long and answered by a new session.
        simulator.script(Held("x"), TOO_LONG)
        results: dict[str, TurnResult] = {}
        send = sender(daemon, old, results)
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "x")
            await simulator.wait_for_requests(2)
            tg.start_soon(send, "a")
            await daemon.logged("a turn waits for the turn under way")
            tg.start_soon(client.session_close, old)
            await daemon.logged("a close waits for the turn under way")
            simulator.release("x")
        new = results["a"].run
        status = await client.daemon_status()
        with pytest.raises(RpcError) as closed:
            await client.session_send(new, "after")
        fresh = (await client.session_open("ada", "c0")).session
    assert results["a"].rolled_from == old and new != old
    assert status.sessions == 0
    assert closed.value.code == 1004
    assert fresh not in (old, new)


@pytest.mark.anyio
async def test_a_pointer_left_on_the_rolled_over_session_is_moved_by_the_next_open(
    tmp_path: Path, simulator: Simulator, org: Path
) -> None:
    # A kill between the old session's end and the pointer's move, or a
    # failed write of the pointer, leaves the pair pointing at the old
    # session. It leads to the new one; left so, every open of the pair
    # dropped the warm session and read it from the store again, and a turn
    # of the dropped copy could run beside one of the copy read meanwhile.
    state = tmp_path / "state"
    reads = "reading it from the store"
    async with in_process_client(org, state) as (daemon, client):
        old, rolled = await rolled_over(client, simulator)
        left_on_old = msgspec.json.encode({"session": old})
        pointer = state / "sessions" / "ada" / "c0.json"
        pointer.write_bytes(left_on_old)
        opened = [(await client.session_open("ada", "c0")).session for _ in range(2)]
        moved = msgspec.json.decode(pointer.read_bytes())
        pointer.write_bytes(left_on_old)
    new = rolled.run
    assert opened == [new, new] and moved == {"session": new}
    assert reads not in daemon.log()
    async with in_process_client(org, state) as (daemon, client):
        reopened = [(await client.session_open("ada", "c0")).session for _ in range(3)]
        result = await client.session_send(old, "three")
    assert reopened == [new, new, new] and (result.run, result.turn) == (new, 2)
    assert msgspec.json.decode(pointer.read_bytes()) == {"session": new}
    assert daemon.log().count(reads) == 1


@pytest.mark.anyio
async def test_the_first_request_after_a_rollover_reads_the_old_system_part_from_the_cache(
    tmp_path: Path,
) -> None:
    # Caching from 128 tokens on, in steps of 16: the example's prompts are small.
    async with Simulator(openai_min_tokens=128, openai_step_tokens=16) as simulator:
        await _rollover_reads_the_cache(tmp_path, simulator)


async def _rollover_reads_the_cache(tmp_path: Path, simulator: Simulator) -> None:
    org = openai_org(tmp_path / "org", simulator)
    system = system_chars(org)
    openai_org(org, simulator, f"session_chars = {system + 900}\nhistory_messages = 2")
    async with in_process_client(org, tmp_path / "state") as (_, client):
        old = (await client.session_open("ada", "c0")).session
        for n in range(12):
            result = await client.session_send(old, f"q{n}")
            if result.rolled_from is not None:
                break
        new = await client.runs_show(result.run)
    assert result.rolled_from == old
    bodies = simulator.bodies()
    # The new session's system part is the old one's, byte for byte ...
    assert messages(bodies[-1])[0] == messages(bodies[-2])[0]
    # ... so the provider reads at least all of it from its cache.
    (first,) = [e for e in new.transcript if e.role == "assistant"]
    assert first.usage is not None
    assert first.usage.cached_input_tokens >= system // 4 - simulator.openai_step_tokens
