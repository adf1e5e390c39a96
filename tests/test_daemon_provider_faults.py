"""Provider faults through a fault-injecting proxy in front of the simulator:
what a client sees of each, with and without a fallback engine."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from engines_org import fallback_org, one_turn, w0_session
from faultproxy import Fault, fault_proxy
from harness import Cli, in_process_client
from orgs import simulated_engine, write_org
from simulator import Simulator

from rosterd.client import RpcError

pytestmark = pytest.mark.anyio


def make_org(root: Path, primary_url: str, retries: int, fallback_url: str | None) -> Path:
    """Worker w0 on ``claude`` (through the proxy), with *retries* and a
    stall timeout of 1 s, and a fallback ``local`` when *fallback_url* is given."""
    settings = f"max_retries = {retries}\ntimeout_s = 1\nbreaker_failures = 1000\n"
    return fallback_org(root, primary_url, fallback_url, settings=settings, channels=10)


@pytest.mark.parametrize(
    ("fault", "heard"),
    [
        ("429", "rate_limited"),
        ("529", "overloaded"),
        ("500", "overloaded"),
        ("502", "overloaded"),
        ("503", "overloaded"),
        ("reset", "overloaded"),
    ],
)
async def test_a_fault_before_the_reply_is_retried_and_the_client_told(
    tmp_path: Path, fault: Fault, heard: str
) -> None:
    async with Simulator() as sim, fault_proxy(("127.0.0.1", sim.port), _once(fault)) as proxy:
        org = make_org(tmp_path / "org", proxy.url, retries=1, fallback_url=None)
        result, waits = await one_turn(org, tmp_path / "state")
    assert result.text and proxy.faults == [fault, None]
    assert [w.reason for w in waits] == [heard]


@pytest.mark.parametrize("fault", ["stall", "stall-mid-stream", "truncate"])
async def test_a_fault_the_engine_cannot_retry_fails_the_turn_and_loses_nothing(
    tmp_path: Path, fault: Fault
) -> None:
    async with Simulator() as sim, fault_proxy(("127.0.0.1", sim.port), _once(fault)) as proxy:
        org = make_org(tmp_path / "org", proxy.url, retries=1, fallback_url=None)
        async with w0_session(org, tmp_path / "state") as (client, session):
            with pytest.raises(RpcError) as failed:
                await client.session_send(session, "hello")
            again = await client.session_send(session, "hello again")
            shown = await client.runs_show(session)
    assert failed.value.code == 1002
    assert again.turn == 2
    # Both messages went to the engine with the second turn's request.
    users = [e.content for e in shown.transcript if e.role == "user"]
    assert len(users) == 2 and "hello again" in users[1]


@pytest.mark.parametrize("fault", ["stall", "truncate", "reset", "529"])
async def test_a_fault_before_any_output_goes_to_the_fallback(tmp_path: Path, fault: Fault) -> None:
    async with (
        Simulator() as sim,
        Simulator() as local,
        fault_proxy(("127.0.0.1", sim.port), _once(fault)) as proxy,
    ):
        org = make_org(tmp_path / "org", proxy.url, retries=0, fallback_url=local.openai_url)
        result, _ = await one_turn(org, tmp_path / "state")
    assert result.text and len(local.requests) == 1


async def test_two_hundred_turns_with_a_third_of_calls_refused_all_answered(
    tmp_path: Path, cli: Cli
) -> None:
    rng = random.Random(29)
    refused = {n: rng.choice(("429", "529")) for n in range(1000) if rng.random() < 0.3}

    def plan(n: int) -> Fault | None:
        return refused.get(n)  # type: ignore[return-value]

    state = tmp_path / "state"
    failed = 0
    async with (
        Simulator() as sim,
        Simulator() as local,
        fault_proxy(("127.0.0.1", sim.port), plan, retry_after=0.01) as proxy,
    ):
        org = make_org(tmp_path / "org", proxy.url, retries=0, fallback_url=local.openai_url)
        async with in_process_client(org, state) as (_, client):
            for channel in range(10):
                opened = await client.session_open("w0", f"c{channel}")
                for turn in range(20):
                    try:
                        await client.session_send(opened.session, f"turn {turn}")
                    except RpcError:
                        failed += 1
    injected = sum(1 for fault in proxy.faults if fault is not None)
    assert failed == 0
    # Every refused call went to the fallback, and so did the calls made
    # while a 429's retry-after ran.
    assert injected > 30 and len(local.requests) >= injected
    stats = await cli.in_thread("server", "stats", "cache", "--state", str(state))
    counted = re.search(r"fallback\D+(\d+)", stats)
    assert counted is not None and int(counted[1]) == len(local.requests)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_key_read_with_a_trailing_newline_is_sent_without_it_and_never_shown(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A key from a file (a Kubernetes secret, `KEY=$(cat file)` without the
    # strip) often ends in a newline, which no header value may hold.
    key = "sk-newline-secret-0123456789"
    monkeypatch.setenv("ROSTER_TEST_KEY", key + "\n")
    state = tmp_path / "state"
    async with Simulator(api_key=key) as sim:
        engine = simulated_engine(sim, kind, 'api_key_env = "ROSTER_TEST_KEY"\nmax_retries = 1')
        org = write_org(tmp_path / "org", engine=engine)
        async with in_process_client(org, state) as (daemon, client):
            opened = await client.session_open("w0", "c0")
            result = await client.session_send(opened.session, "hello")
    assert result.text and len(sim.requests) == 1
    assert key not in daemon.log()
    assert all(key.encode() not in path.read_bytes() for path in state.rglob("*.jsonl"))


def _once(fault: Fault) -> Callable[[int], Fault | None]:
    """The first request meets *fault*; the rest go through."""
    return lambda n: fault if n == 0 else None
