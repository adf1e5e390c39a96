"""A session never resends what its conversation already holds: real daemon,
real socket, the provider simulator recording every request byte."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
from harness import Cli, DaemonProcess, InProcessDaemon, opened_session, process_client
from orgs import filler, simulated_engine, write_org
from simulator import Simulator, Status

from rosterd.client import RosterClient, RpcError
from rosterd.compiler import BlockTrace, held_items

QUESTION = "how is the pager doing?"


def user_inputs(body: bytes) -> list[str]:
    """The user messages of one recorded Messages API request, in order."""
    request = msgspec.json.decode(body)
    texts = []
    for message in request["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.append("".join(part["text"] for part in content))
    return texts


def envelopes(text: str, block: str) -> list[dict[str, Any]]:
    lines = [msgspec.json.decode(line) for line in text.splitlines()]
    return [line for line in lines if line["block"] == block]


def advisory_chars(text: str) -> int:
    """Characters of memory and briefing envelopes in *text*, newlines included."""
    return sum(
        len(line) + 1
        for line in text.splitlines()
        if line.startswith(('{"block":"memory"', '{"block":"briefing"'))
    )


def turn_records(state: Path, run: str) -> list[dict[str, Any]]:
    path = state / "runs" / run / "context.jsonl"
    records = [msgspec.json.decode(line) for line in path.read_bytes().splitlines()]
    return [r for r in records if r["kind"] == "turn"]


def block(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(b for b in record["blocks"] if b["block"] == name)


def held(records: list[dict[str, Any]], name: str) -> dict[str, int]:
    """What *records* say the conversation held as of the last, each id with
    the turn since which: folded record by record, as ``runs show`` does."""
    items: dict[str, int] | None = None
    for record in records:
        items = held_items(items, msgspec.convert(block(record, name), BlockTrace))
    return items or {}


@pytest.fixture
def org(tmp_path: Path, simulator: Simulator) -> Path:
    """Worker w0 in c0 on *simulator*'s Messages API, without retries."""
    engine = simulated_engine(simulator, "anthropic", "max_retries = 0")
    return write_org(tmp_path / "org", engine=engine)


async def seeded_session(
    client: RosterClient, notes: int, gates: int, turns: int
) -> tuple[list[str], str]:
    """*notes* notes and *gates* gates of w0 in c0, then a session of w0 in
    c0 with *turns* turns: the gate ids, and the session."""
    for n in range(notes):
        text = filler(f"pager note {n}", 200).replace("\n", " ").strip()
        await client.memory_add("w0", text)
    ids = []
    for n in range(gates):
        gate = await client.gate_file("w0", f"approve pager change {n}?", channel="c0")
        ids.append(gate.id)
    opened = await client.session_open("w0", "c0")
    await send(client, opened.session, turns)
    return ids, opened.session


async def send(client: RosterClient, session: str, turns: int) -> None:
    for _ in range(turns):
        await client.session_send(session, QUESTION)


@pytest.mark.anyio
async def test_thirty_turns_send_each_note_and_gate_once(
    org: Path, tmp_path: Path, simulator: Simulator, cli: Cli
) -> None:
    async with process_client(org, tmp_path / "state") as (process, client):
        gates, session = await seeded_session(client, notes=20, gates=3, turns=30)

    assert len(simulator.requests) == 30
    inputs = user_inputs(simulator.requests[-1].body)
    assert len(inputs) == 30
    request_chars = len(simulator.requests[-1].body)
    # The 30th turn adds no memory or briefing at all; what the request holds
    # of them is the one copy the first turn sent.
    assert envelopes(inputs[-1], "memory") == envelopes(inputs[-1], "briefing") == []
    assert advisory_chars(inputs[-1]) <= 0.05 * request_chars
    assert all(advisory_chars(text) == 0 for text in inputs[1:])
    notes = Counter(m["id"] for text in inputs for m in envelopes(text, "memory"))
    assert notes == {f"m-{n}": 1 for n in range(1, 21)}
    shown_gates = [b for text in inputs for b in envelopes(text, "briefing")]
    assert [(b["kind"], b["gate"]) for b in shown_gates] == [("gate", g) for g in gates]
    # Cumulatively, memory and briefing are one turn's worth, not thirty.
    whole = sum(map(advisory_chars, inputs))
    assert whole == advisory_chars(inputs[0]) < 0.5 * request_chars

    records = turn_records(process.state, session)
    last = records[-1]
    memory, briefing = block(last, "memory"), block(last, "briefing")
    assert (memory["status"], memory["rendered_chars"], briefing["status"]) == (
        "absent",
        0,
        "absent",
    )
    assert held(records, "memory") == {f"m-{n}": 1 for n in range(1, 21)}
    assert held(records, "briefing") == {g: 1 for g in gates}
    # The memory and briefing blocks say only what changed, and nothing did:
    # the record does not grow with what the session showed.
    assert (memory["held"], memory["already_shown"], memory["newly_held"]) == (20, [], [])
    assert (briefing["held"], briefing["already_shown"], briefing["newly_held"]) == (3, [], [])
    for name in ("memory", "briefing"):
        assert all(block(r, name)["already_shown"] == [] for r in records[2:])
    assert last["budget"]["memory"] == last["budget"]["briefing"] == 0

    shown = await cli.in_thread("server", "runs", "show", session, "--state", str(process.state))
    assert "already in the conversation, left out: memory 20 (since turn 1) · briefing 3" in shown
    assert "nothing new: all in the conversation already" in shown


@pytest.mark.anyio
async def test_a_note_or_a_resolution_between_turns_is_in_the_next_turn(
    org: Path, tmp_path: Path, simulator: Simulator
) -> None:
    async with process_client(org, tmp_path / "state") as (process, client):
        gates, session = await seeded_session(client, notes=5, gates=2, turns=10)
        note = await client.memory_add("w0", "pager moved to v2")
        await send(client, session, 1)
        await client.gate_resolve(gates[1], "approved")
        await send(client, session, 2)

    inputs = user_inputs(simulator.requests[-1].body)
    first = sorted(m["id"] for m in envelopes(inputs[0], "memory"))
    assert first == [f"m-{n}" for n in range(1, 6)]
    assert envelopes(inputs[10], "memory") == [
        {"block": "memory", "id": note.id, "text": "pager moved to v2"}
    ]
    assert envelopes(inputs[10], "briefing") == []
    assert envelopes(inputs[11], "briefing") == [
        {
            "block": "briefing",
            "kind": "resolved",
            "gate": gates[1],
            "summary": "approve pager change 1?",
            "outcome": "approved",
            "note": "",
        }
    ]
    assert advisory_chars(inputs[12]) == 0
    records = turn_records(process.state, session)
    assert held(records[:13], "memory") == {
        **{f"m-{n}": 1 for n in range(1, 6)},
        note.id: 11,
    }
    # Turn 12 says what changed since turn 11's record: the note turn 11 sent.
    assert block(records[11], "memory")["newly_held"] == [{"id": note.id, "since": 11}]
    # Turn 12's briefing says the gate it resolved is no longer held open;
    # turn 13's, that nothing changed.
    assert block(records[11], "briefing")["no_longer_held"] == [gates[1]]
    assert block(records[12], "briefing")["newly_held"] == []
    assert block(records[12], "briefing")["no_longer_held"] == []
    assert held(records[:13], "briefing") == {gates[0]: 1}


@pytest.mark.anyio
async def test_what_was_shown_survives_a_restart_and_a_failed_engine_call(
    org: Path, tmp_path: Path, simulator: Simulator
) -> None:
    with DaemonProcess(org, tmp_path / "state").start() as daemon:
        async with await daemon.client() as client:
            gates, session = await seeded_session(client, notes=3, gates=1, turns=1)
            await client.memory_add("w0", "pager is flaky on Mondays")
            simulator.script(Status(400, "bad request"))
            with pytest.raises(RpcError):
                await send(client, session, 1)
        daemon.restart()
        async with opened_session(daemon, "w0", "c0") as (client, reopened):
            assert reopened == session
            await send(client, session, 1)
            await client.gate_resolve(gates[0], "no")
            await send(client, session, 1)

    first, failed, resumed, resolved = (user_inputs(r.body) for r in simulator.requests)
    # The failed turn's input stays in the transcript and goes out with the
    # next request, so the note it carried is not sent a second time.
    assert failed[-1] == resumed[1]
    assert [m["text"] for m in envelopes(failed[-1], "memory")] == ["pager is flaky on Mondays"]
    assert advisory_chars(resumed[-1]) == 0
    assert [b["kind"] for b in envelopes(resolved[-1], "briefing")] == ["resolved"]
    assert resolved[:-1] == resumed
    everything = "".join(resolved)
    assert Counter(m["id"] for m in envelopes(everything, "memory")) == {
        "m-1": 1,
        "m-2": 1,
        "m-3": 1,
        "m-4": 1,
    }
    assert first == resolved[:1]
    # The trace says the same, record after record: a restarted daemon's
    # first record lists every held note again, later ones what changed.
    records = turn_records(daemon.state, session)
    assert held(records, "memory") == {"m-1": 1, "m-2": 1, "m-3": 1, "m-4": 2}
    changes = [block(r, "memory")["newly_held"] for r in records]
    assert changes == [None, [{"id": f"m-{n}", "since": 1} for n in (1, 2, 3)], None, []]
    # The briefing alike: its gate held from turn 1, listed again after the
    # restart, then gone once resolved.
    assert held(records, "briefing") == {}
    briefings = [block(r, "briefing") for r in records]
    assert [(b["newly_held"], b["no_longer_held"]) for b in briefings] == [
        (None, []),
        ([{"id": gates[0], "since": 1}], []),
        (None, []),
        ([], [gates[0]]),
    ]
    assert briefings[2]["already_shown"] == [{"id": gates[0], "since": 1}]


@pytest.mark.anyio
async def test_a_new_session_and_a_direct_run_show_everything_again(
    served: InProcessDaemon,
) -> None:
    async with await served.client() as client:
        await client.memory_add("ada", "deploys freeze on Fridays")
        first = await client.session_open("ada", "general")
        await client.session_send(first.session, "one")
        await client.session_send(first.session, "two")
        direct = await client.run_direct("ada", "status?")
        await client.session_close(first.session)
        second = await client.session_open("ada", "general")
        await client.session_send(second.session, "three")

    def memory_of(run: str) -> list[list[str]]:
        path = served.state / "runs" / run / "context.jsonl"
        records = [msgspec.json.decode(line) for line in path.read_bytes().splitlines()]
        return [
            [m["text"] for m in envelopes(block(r, "memory")["content"], "memory")]
            for r in records
            if r["kind"] != "system"
        ]

    note = ["deploys freeze on Fridays"]
    assert memory_of(first.session) == [note, []]
    assert memory_of(direct.run) == [note]
    assert memory_of(second.session) == [note]


@pytest.mark.anyio
async def test_notes_that_share_nothing_with_the_message_come_once_unless_new(
    tmp_path: Path,
) -> None:
    """Past a session's first turn, a note that shares no word with the
    message comes only if it was written since the previous turn."""
    org = write_org(tmp_path / "org", sections="[workers.w0.context]\nmemory = 1000\n")
    async with process_client(org, tmp_path / "state") as (process, client):
        for n in range(1, 13):
            text = f"invoice {n} for the kestrel account is paid in full, " + "receipt " * 12
            await client.memory_add("w0", text)
        session = (await client.session_open("w0", "c0")).session
        await send(client, session, 2)
        note = await client.memory_add("w0", "the kestrel account closes in May")
        await send(client, session, 1)

    first, second, third = (block(r, "memory") for r in turn_records(process.state, session))
    shown = [line["id"] for line in envelopes(first["content"], "memory")]
    # The first turn fills the block, newest first; the second sends nothing
    # of the older notes; the third only the note written since.
    assert shown == [f"m-{n}" for n in range(12, 12 - len(shown), -1)]
    assert 0 < len(shown) < 12
    assert (second["content"], second["items"], second["omitted"]) == ("", 0, 12 - len(shown))
    assert [line["id"] for line in envelopes(third["content"], "memory")] == [note.id]
    assert third["omitted"] == 12 - len(shown)
