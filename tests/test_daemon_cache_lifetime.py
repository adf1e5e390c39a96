"""A cache still warm at human pace: the lifetime a session's requests ask for,
chosen from the gaps between its turns, on a clock the test moves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engines_org import anthropic_engine, paced_session
from harness import Cli, daemon_in_process
from orgs import simulated_engine, write_org
from simulator import Simulator, Status

from rosterd import ConfigError
from rosterd.org import EngineConfig, load_org
from rosterd.protocol import TranscriptEntry
from rosterd.runtime import plan_cache

pytestmark = pytest.mark.anyio

ANTHROPIC = EngineConfig(kind="anthropic", model="m")


@pytest.mark.parametrize(
    ("gaps", "ttl"),
    [
        ([], "5m"),
        ([20.0, 45.0, 90.0], "5m"),
        ([840.0, 1200.0, 600.0], "1h"),
        ([30.0, 30.0, 2400.0], "1h"),
        ([30.0, 30.0, 30.0, 4000.0], "5m"),
        ([30.0, 2400.0, 2400.0], "1h"),
        ([7200.0, 9000.0], "5m"),
    ],
)
def test_auto_picks_the_lifetime_with_the_lower_expected_cost(gaps: list[float], ttl: str) -> None:
    plan = plan_cache(ANTHROPIC, gaps)
    assert plan is not None and plan.ttl == ttl
    assert plan.reason.startswith(f"ttl {ttl}: ")


def test_a_fixed_lifetime_and_an_engine_without_one() -> None:
    fixed = plan_cache(EngineConfig(kind="anthropic", model="m", cache_ttl="1h"), [10.0])
    assert fixed is not None and (fixed.ttl, fixed.reason) == (
        "1h",
        "ttl 1h: set in the engine's cache_ttl",
    )
    assert plan_cache(EngineConfig(kind="openai", model="m"), [900.0]) is None
    assert plan_cache(EngineConfig(kind="echo"), [900.0]) is None


async def run_session(root: Path, choice: str, gap_s: float, turns: int) -> list[TranscriptEntry]:
    """*turns* turns of one session, *gap_s* apart, with ``cache_ttl = choice``;
    its assistant entries."""
    entries, requests = await paced_session(root, anthropic_engine(choice), [gap_s] * turns)
    ttls = [json.loads(r.body)["system"][-1]["cache_control"].get("ttl") for r in requests]
    assert len(ttls) == turns == len(entries)
    return entries


async def test_at_human_pace_auto_keeps_the_prefix_an_hour_and_pays_far_less(
    tmp_path: Path, cli: Cli
) -> None:
    auto = await run_session(tmp_path / "auto", "auto", gap_s=840, turns=10)
    five = await run_session(tmp_path / "five", "5m", gap_s=840, turns=10)

    checks = [e.cache for e in auto]
    assert all(c is not None for c in checks)
    assert [c.ttl for c in checks if c] == ["5m"] + ["1h"] * 9
    assert checks[1] is not None
    assert checks[1].ttl_reason == "ttl 1h: median gap 14 min over 1 turn(s)"
    # The switch costs one write, and says so; from then on every turn reads.
    assert checks[1].cause is not None and checks[1].cause.startswith(
        "the cache lifetime changed from 5m to 1h"
    )
    assert [c.verdict for c in checks[2:] if c] == ["hit"] * 8
    # With five minutes every turn after the first writes its whole prefix again.
    assert [e.cache.verdict for e in five[1:] if e.cache] == ["provider-miss"] * 9
    assert all(e.usage is not None and e.usage.cache_write_1h_tokens == 0 for e in five)
    assert any(e.usage is not None and e.usage.cache_write_1h_tokens > 0 for e in auto)
    cost = {
        name: sum(e.cost.usd for e in entries if e.cost is not None)
        for name, entries in (("auto", auto), ("5m", five))
    }
    assert cost["auto"] < 0.5 * cost["5m"]
    # runs show says which lifetime the turns asked for, where it changed, and why.
    (run,) = (tmp_path / "auto" / "state" / "runs").iterdir()
    out = await cli.in_thread(
        "server", "runs", "show", run.name, "--state", str(tmp_path / "auto" / "state")
    )
    assert "turn 1: cache ttl 5m: no gap between turns seen yet" in out
    assert "turn 2: cache ttl 1h: median gap 14 min over 1 turn(s)" in out
    assert "turn 3: cache ttl" not in out


async def test_in_a_burst_auto_stays_at_five_minutes(tmp_path: Path) -> None:
    burst = await run_session(tmp_path, "auto", gap_s=30, turns=4)
    assert [e.cache.ttl for e in burst if e.cache] == ["5m"] * 4
    assert [e.cache.verdict for e in burst[1:] if e.cache] == ["hit"] * 3


@pytest.mark.parametrize(
    ("engine", "extra", "key"),
    [
        ('kind = "openai"\nmodel = "m"\ncache_ttl = "1h"', "", "engine.cache_ttl"),
        ('kind = "echo"', '[workers.w0.engine]\ncache_ttl = "5m"\n', "workers.w0.engine.cache_ttl"),
        ('kind = "anthropic"\nmodel = "m"\ncache_ttl = "2h"', "", "engine.cache_ttl"),
    ],
)
def test_a_cache_lifetime_only_an_anthropic_engine_takes(
    tmp_path: Path, engine: str, extra: str, key: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_org(write_org(tmp_path, identity_chars=100, engine=engine, sections=extra))
    assert refused.value.key == key


async def test_a_server_that_refuses_a_lifetime_gets_one_retry_without_it(tmp_path: Path) -> None:
    async with Simulator() as sim:
        refused = Status(400, "system.0.cache_control.ttl: Extra inputs are not permitted")
        sim.script(refused)
        write_org(tmp_path / "org", engine=simulated_engine(sim, "anthropic", 'cache_ttl = "1h"'))
        async with (
            daemon_in_process(tmp_path / "org", tmp_path / "state") as daemon,
            await daemon.client() as client,
        ):
            opened = await client.session_open("w0", "c0")
            first = await client.session_send(opened.session, "hello")
            await client.session_send(opened.session, "again")
            log = daemon.log()
    ttls = [json.loads(r.body)["system"][-1]["cache_control"].get("ttl") for r in sim.requests]
    assert first.text and ttls == ["1h", None, None]
    assert "server deviation" in log and "refused a 1-hour cache lifetime" in log
