"""The daemon against servers that frame streams their own way, end to end."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from harness import DaemonProcess, process_client, set_engine
from orgs import simulated_engine
from simulator import Framing, Omit, Reply, Simulator

from rosterd.client import RosterClient
from rosterd.org import EngineKind
from rosterd.protocol import ChatMessage

pytestmark = pytest.mark.anyio

# Raw U+2028/U+2029/U+0085 (legal unescaped in JSON), the C0 line breakers
# (escaped, as JSON requires), lone CR, CRLF and LF, multi-byte characters.
TEXT = "one\u2028two\u2029three\u0085four\x0bfive\x0csix\x1c\x1d\x1eseven\rx\r\ny\nz é 中 😀"


@asynccontextmanager
async def session_on(
    sim: Simulator, kind: EngineKind, org_dir: Path, state: Path
) -> AsyncIterator[tuple[DaemonProcess, RosterClient, str]]:
    """A daemon process of the example org on *sim*'s API of *kind*, a client
    and a session of ada in general."""
    set_engine(org_dir, simulated_engine(sim, kind, "max_retries = 1", model="m"))
    async with process_client(org_dir, state) as (process, client):
        yield process, client, (await client.session_open("ada", "general")).session


def transcript(state: Path, run: str) -> list[dict[str, Any]]:
    path = state / "runs" / run / "transcript.jsonl"
    return [msgspec.json.decode(line) for line in path.read_bytes().splitlines()]


def sent_assistant_text(kind: EngineKind, body: bytes) -> str:
    message = msgspec.json.decode(body)["messages"][-2]
    assert message["role"] == "assistant"
    content = message["content"]
    return str(content if kind == "openai" else content[0]["text"])


async def test_a_reply_split_byte_by_byte_is_kept_byte_exact(
    org_dir: Path, tmp_path: Path, kind: EngineKind
) -> None:
    framing = Framing(newline="\r\n", raw=True, chunk_bytes=1)
    async with Simulator(framing=framing, delta_chars=3) as sim:
        sim.script(Reply(TEXT))
        state = tmp_path / "state"
        async with session_on(sim, kind, org_dir, state) as (_, client, session):
            first = await client.session_send(session, "one")
            await client.session_send(session, "two")
            (context,) = (await client.runs_context(session)).turns
        bodies = sim.bodies()
    assert first.text == TEXT
    entries = transcript(state, session)
    assert next(e["content"] for e in entries if e["role"] == "assistant") == TEXT
    assert context.turn == 2
    assert context.messages[1] == ChatMessage(role="assistant", content=TEXT)
    assert sent_assistant_text(kind, bodies[1]) == TEXT


async def test_a_turn_without_reported_usage_is_unmeasured_never_zero(
    org_dir: Path, tmp_path: Path, kind: EngineKind
) -> None:
    async with Simulator(min_cacheable_tokens=64, openai_min_tokens=64) as sim:
        sim.script(Omit("usage" if kind == "openai" else "message_start", text="unreported"))
        state = tmp_path / "state"
        async with session_on(sim, kind, org_dir, state) as (process, client, session):
            first = await client.session_send(session, "one")
            second = await client.session_send(session, "two")
        log = process.log_path.read_text()
    assert first.text == "unreported"
    assert first.usage is None
    assert second.usage is not None and second.usage.input_tokens > 0
    replies = [e for e in transcript(state, session) if e["role"] == "assistant"]
    assert replies[0]["usage"] is None
    assert replies[0]["cache"]["verdict"] == "unmeasured"
    assert replies[1]["usage"]["input_tokens"] > 0
    assert replies[1]["cache"]["verdict"] != "unmeasured"
    assert log.count("server deviation") == 1
    shown = await anyio.run_process(
        [sys.executable, "-m", "rosterd.cli", "server", "runs", "show", session, "--json"],
        env={**os.environ, "ROSTER_STATE": str(state)},
    )
    usage = json.loads(shown.stdout)["usage"]
    assert usage["turns"][0]["input_tokens"] is None
    assert usage["turns"][0]["cache"]["verdict"] == "unmeasured"
    assert usage["input_tokens"] == usage["turns"][1]["input_tokens"] > 0
