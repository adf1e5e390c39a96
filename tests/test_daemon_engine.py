"""The daemon against a real HTTP provider (the loopback simulator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from harness import process_client, set_engine
from orgs import simulated_engine
from simulator import Simulator, Status

from rosterd.client import RpcError


@pytest.fixture
def org(org_dir: Path, simulator: Simulator) -> Path:
    """The example org on *simulator*'s OpenAI API, retrying once."""
    set_engine(org_dir, simulated_engine(simulator, settings="max_retries = 1"))
    return org_dir


def chat_messages(body: bytes) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = msgspec.json.decode(body)["messages"]
    return messages


@pytest.mark.anyio
async def test_every_request_extends_the_previous_one_byte_for_byte(
    org: Path, tmp_path: Path, simulator: Simulator
) -> None:
    async with process_client(org, tmp_path / "state") as (_, client):
        # History is snapshotted when the session wakes, so post first.
        await client.channel_post("general", "bo", "hi all")
        opened = await client.session_open("ada", "general")
        replies = []
        for n in range(20):
            if n == 5:
                await client.memory_add("ada", "prefers short answers")
            result = await client.session_send(opened.session, f"question {n}")
            replies.append(result.text)
    bodies = simulator.bodies()
    assert len(bodies) == 20
    requests = [chat_messages(body) for body in bodies]
    system = requests[0][0]
    assert system["role"] == "system"
    for n in range(1, 20):
        previous, current = requests[n - 1], requests[n]
        assert current[: len(previous)] == previous
        assert current[len(previous)] == {"role": "assistant", "content": replies[n - 1]}
        assert current[len(previous) + 1]["role"] == "user"
        assert len(current) == len(previous) + 2
    keys = {msgspec.json.decode(body)["prompt_cache_key"] for body in bodies}
    assert keys == {opened.route_key}
    first_turn = requests[0][1]["content"]
    assert '{"block":"history","from":"bo","text":"hi all"}' in first_turn
    assert all('"block":"history"' not in r[-1]["content"] for r in requests[1:])
    assert '"prefers short answers"' in requests[5][-1]["content"]
    assert '"prefers short answers"' not in requests[4][-1]["content"]


@pytest.mark.anyio
async def test_oversized_identity_never_reaches_the_engine(
    org: Path, tmp_path: Path, simulator: Simulator
) -> None:
    (org / "workers" / "ada" / "identity.md").write_text("y" * 20000)
    async with process_client(org, tmp_path / "state") as (_, client):
        with pytest.raises(RpcError) as failure:
            await client.session_open("ada", "general")
        with pytest.raises(RpcError) as task_failure:
            await client.run_direct("ada", "anything")
    assert failure.value.code == task_failure.value.code == 1001
    assert simulator.requests == []


@pytest.mark.anyio
async def test_a_provider_500_is_a_clear_error_and_the_user_turn_is_kept(
    org: Path, tmp_path: Path, simulator: Simulator
) -> None:
    async with process_client(org, tmp_path / "state") as (process, client):
        opened = await client.session_open("ada", "general")
        session = opened.session
        await client.session_send(session, "one")
        simulator.script(Status(500, "upstream exploded"), Status(500, "upstream exploded"))
        with pytest.raises(RpcError) as failure:
            await client.session_send(session, "two")
        result = await client.session_send(session, "three")
    assert failure.value.code == 1002
    assert failure.value.data["provider"] == "openai"
    assert failure.value.data["status"] == 500
    assert "upstream exploded" in str(failure.value)
    assert result.turn == 3
    last = chat_messages(simulator.bodies()[-1])
    users = [m["content"] for m in last if m["role"] == "user"]
    assert ['"text":"two"' in u for u in users] == [False, True, False]
    transcript = (process.state / "runs" / session / "transcript.jsonl").read_bytes().splitlines()
    roles = [msgspec.json.decode(line)["role"] for line in transcript]
    assert roles == ["user", "assistant", "user", "error", "user", "assistant"]


@pytest.mark.anyio
async def test_a_missing_api_key_fails_the_turn_before_anything_is_recorded(
    org_dir: Path, tmp_path: Path, simulator: Simulator
) -> None:
    set_engine(
        org_dir, simulated_engine(simulator, settings='api_key_env = "ROSTERD_TEST_UNSET_KEY"')
    )
    async with process_client(org_dir, tmp_path / "state") as (process, client):
        opened = await client.session_open("ada", "general")
        for _ in range(2):
            with pytest.raises(RpcError) as failure:
                await client.session_send(opened.session, "hi")
            assert failure.value.code == 1005
            assert "ROSTERD_TEST_UNSET_KEY" in str(failure.value)
    assert simulator.requests == []
    run = process.state / "runs" / opened.session
    transcript = run / "transcript.jsonl"
    assert not transcript.exists() or transcript.read_bytes() == b""
    kinds = [
        msgspec.json.decode(line)["kind"]
        for line in (run / "context.jsonl").read_bytes().splitlines()
    ]
    assert kinds == ["system"]
