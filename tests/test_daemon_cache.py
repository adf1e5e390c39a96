"""Cache misses explained, against the provider simulator's caching rules."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from harness import Cli, DaemonProcess, copy_org, set_engine
from orgs import simulated_engine, write_org
from simulator import Simulator

from rosterd.client import RosterClient
from rosterd.protocol import CacheCheck, RunShown


async def chat(client: RosterClient, channel: str, turns: int, worker: str = "w0") -> str:
    opened = await client.session_open(worker, channel)
    for n in range(turns):
        await client.session_send(opened.session, f"question {n}")
    return opened.session


async def shown(client: RosterClient, run: str) -> RunShown:
    return await client.runs_show(run)


def checks(run: RunShown) -> list[CacheCheck]:
    """The cache check of each reply of *run*; every reply has one."""
    found = []
    for entry in run.transcript:
        if entry.role == "assistant":
            assert entry.cache is not None, entry
            found.append(entry.cache)
    return found


def verdicts(run: RunShown) -> list[str]:
    return [check.verdict for check in checks(run)]


@pytest.mark.anyio
async def test_a_stable_session_has_no_prefix_misses(
    tmp_path: Path, simulator: Simulator, cli: Cli
) -> None:
    write_org(tmp_path / "org", engine=simulated_engine(simulator, "anthropic"))
    with DaemonProcess(tmp_path / "org", tmp_path / "state").start() as process:
        async with await process.client() as client:
            session = await chat(client, "c0", 20)
            run = await shown(client, session)
    assert verdicts(run) == ["cold"] + ["hit"] * 19
    turns = [r for r in run.records if r.kind == "turn"]
    assert all(c.status == "stable" for r in turns[1:] for c in r.cache)
    hits = checks(run)[1:]
    assert all(h.reported_tokens >= h.expected_tokens - 128 for h in hits)
    stats = msgspec.json.decode(
        await cli.in_thread("server", "stats", "cache", "--state", str(process.state), "--json")
    )
    assert stats["compiler_caused_misses"] == 0
    assert stats["verdicts"] == {"cold": 1, "hit": 19}
    assert stats["cache_read_share"] > 0.8


@pytest.mark.anyio
async def test_an_identity_edit_between_sessions_is_attributed_to_identity(
    tmp_path: Path, simulator: Simulator, cli: Cli
) -> None:
    org = tmp_path / "org"
    write_org(org, engine=simulated_engine(simulator, "anthropic"))
    with DaemonProcess(org, tmp_path / "state").start() as process:
        async with await process.client() as client:
            first = await chat(client, "c0", 2)
            await client.session_close(first)
            identity = org / "workers" / "w0" / "identity.md"
            identity.write_text(identity.read_text() + "\nA new rule.\n")
            second = await chat(client, "c0", 1)
            run = await shown(client, second)
    (turn,) = [r for r in run.records if r.kind == "turn"]
    assert [(c.name, c.status, c.block, c.cause) for c in turn.cache] == [
        ("connections", "changed", "identity", "identity edited"),
        ("purpose", "changed", "identity", "identity edited"),
        ("system", "changed", "identity", "identity edited"),
    ]
    assert turn.cache[0].previous_run == first
    (check,) = checks(run)
    assert check.verdict == "prefix-changed"
    assert check.cause is not None and "identity edited" in check.cause
    state = str(process.state)
    shown_text = await cli.in_thread("server", "runs", "show", second, "--state", state)
    assert "turn 1: prefix-changed: identity edited (block identity)" in shown_text
    assert f"prefix against run {first}: after connections changed" in shown_text
    stats = msgspec.json.decode(
        await cli.in_thread(
            "server", "stats", "cache", "--state", state, "--worker", "w0", "--json"
        )
    )
    assert stats["misses_by_cause"] == {"identity edited": 1}
    assert stats["compiler_caused_misses"] == 1
    assert "compiler-caused misses (the prefix changed): 1" in await cli.in_thread(
        "server", "stats", "cache", "--state", state
    )


@pytest.mark.anyio
async def test_a_provider_side_expiry_is_blamed_on_the_provider(
    tmp_path: Path, simulator: Simulator
) -> None:
    write_org(tmp_path / "org", engine=simulated_engine(simulator, "anthropic"))
    with DaemonProcess(tmp_path / "org", tmp_path / "state").start() as process:
        async with await process.client() as client:
            opened = await client.session_open("w0", "c0")
            for n in range(3):
                await client.session_send(opened.session, f"q{n}")
            simulator.clear_cache()  # as a TTL expiry or eviction would
            await client.session_send(opened.session, "q3")
            run = await shown(client, opened.session)
    assert verdicts(run) == ["cold", "hit", "hit", "provider-miss"]
    last = [r for r in run.records if r.kind == "turn"][-1]
    assert all(c.status == "stable" for c in last.cache)


@pytest.mark.anyio
async def test_a_prompt_below_the_minimum_is_labelled(tmp_path: Path, simulator: Simulator) -> None:
    org = copy_org(tmp_path / "org")
    set_engine(org, simulated_engine(simulator, "anthropic"))
    # Without the memory tools, the example's prompt is under the minimum.
    toml = org / "org.toml"
    toml.write_text(
        toml.read_text().replace("[workers.grace]", '[workers.grace]\nmemory_scope = "off"')
    )
    with DaemonProcess(org, tmp_path / "state").start() as process:
        async with await process.client() as client:
            session = await chat(client, "general", 2, worker="grace")
            run = await shown(client, session)
    assert verdicts(run) == ["cold", "below-minimum"]
    check = checks(run)[-1]
    assert check.cause is not None and "below the minimum of 1024" in check.cause
