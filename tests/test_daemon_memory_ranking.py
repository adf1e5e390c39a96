"""Memory ranking through a daemon: a session's short message borrows the
conversation's terms, the same after a restart, and the trace says so."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from harness import copy_org, daemon_in_process

from rosterd.compiler import BlockTrace, ContextRecord

pytestmark = pytest.mark.anyio


def last_memory_block(state: Path, run: str) -> BlockTrace:
    lines = (state / "runs" / run / "context.jsonl").read_bytes().splitlines()
    record = msgspec.json.decode(lines[-1], type=ContextRecord)
    (block,) = (b for b in record.blocks if b.block == "memory")
    return block


async def test_a_short_message_borrows_the_previous_message_s_terms(tmp_path: Path) -> None:
    org = copy_org(tmp_path / "org")
    state = tmp_path / "state"
    async with daemon_in_process(org, state) as daemon, await daemon.client() as client:
        opened = await client.session_open("ada", "general")
        await client.session_send(opened.session, "did Tom finally get the guitar from Lena?")
        # Written after the first turn, so the second turn has them fresh.
        await client.memory_add("ada", "Tom paid 300 euros for Lena's guitar")
        await client.memory_add("ada", "the car needs new tyres before winter")
        sent = await client.session_send(opened.session, "how much was it?")
    block = last_memory_block(state, sent.run)
    assert block.notes is not None
    first = block.notes[0]
    # Newer, but sharing nothing: the tyres note comes second.
    assert [n.id for n in block.notes][:2] == [first.id, "m-2"]
    assert first.id == "m-1" and first.terms == ()
    assert {"tom", "guitar", "lena"} <= set(first.borrowed)

    # After a restart the session reads the same messages back from its
    # transcript: the next short message borrows alike.
    async with daemon_in_process(org, state) as daemon, await daemon.client() as client:
        reopened = await client.session_open("ada", "general")
        assert reopened.session == opened.session
        await client.memory_add("ada", "Lena is moving to Porto in May")
        await client.memory_add("ada", "the office plants need water")
        again = await client.session_send(reopened.session, "and when?")
    block = last_memory_block(state, again.run)
    assert block.notes is not None
    assert block.notes[0].id == "m-3"
    assert "lena" in block.notes[0].borrowed
