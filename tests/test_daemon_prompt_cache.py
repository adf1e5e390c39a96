"""OpenAI's caching contracts, chosen per session: retention on the older
models, explicit breakpoints (or no cache) on gpt-5.6 and later, on a clock
the test moves and a simulator that bills as OpenAI does."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from engines_org import PRICES, openai_engine, paced_session
from orgs import write_org
from provider_schemas import openai_errors
from simulator import Recorded

from rosterd import ConfigError
from rosterd.org import EngineConfig, PriceConfig, load_org
from rosterd.pricing import bill, price_for
from rosterd.protocol import TranscriptEntry
from rosterd.runtime import plan_cache

pytestmark = pytest.mark.anyio

EXPLICIT = EngineConfig(kind="openai", model="gpt-5.6-mini")
OLDER = EngineConfig(kind="openai", model="gpt-5.1")


@pytest.mark.parametrize(
    ("gaps", "choice"),
    [
        ([], "30m"),
        ([30.0, 600.0, 1700.0], "30m"),
        ([2400.0, 600.0, 3000.0], "30m"),
        ([7200.0, 9000.0, 5000.0], "uncached"),
        ([86400.0], "uncached"),
    ],
)
def test_auto_on_the_explicit_contract_writes_only_what_pays(
    gaps: list[float], choice: str
) -> None:
    plan = plan_cache(EXPLICIT, gaps)
    assert plan is not None and plan.ttl == choice
    label = "explicit 30m" if choice == "30m" else "uncached"
    assert plan.reason.startswith(f"{label}: ")


def test_auto_elsewhere_retains_a_day_where_the_model_can_and_leaves_other_servers_be() -> None:
    older = plan_cache(OLDER, [7200.0])
    assert older is not None and older.ttl == "24h"
    assert older.reason.startswith("retention 24h: gpt-5.1 keeps")
    assert plan_cache(EngineConfig(kind="openai", model="llama-3.1-8b"), [60.0]) is None
    listed = EngineConfig(kind="openai", model="house-model", explicit_cache_models=("house-*",))
    assert (plan := plan_cache(listed, [60.0])) is not None and plan.ttl == "30m"
    unlisted = EngineConfig(kind="openai", model="gpt-5.6", explicit_cache_models=())
    assert (plan := plan_cache(unlisted, [60.0])) is not None and plan.ttl == "24h"


@pytest.mark.parametrize(("setting", "choice"), [("implicit", "implicit"), ("explicit", "30m")])
def test_a_fixed_choice_is_kept_whatever_the_pace(setting: str, choice: str) -> None:
    config = EngineConfig(kind="openai", model="gpt-5.6", prompt_cache=setting)  # type: ignore[arg-type]
    plan = plan_cache(config, [86400.0] * 5)
    assert plan is not None and plan.ttl == choice
    assert plan.reason.endswith("set in the engine's prompt_cache")


@pytest.mark.parametrize(
    ("engine", "key"),
    [
        ('kind = "anthropic"\nmodel = "m"\nprompt_cache = "explicit"', "engine.prompt_cache"),
        ('kind = "openai"\nmodel = "m"\ndiagnose_cache = true', "engine.diagnose_cache"),
        ('kind = "echo"\nretention_models = ["x"]', "engine.retention_models"),
        ('kind = "openai"\nmodel = "m"\nprompt_cache = "always"', "engine.prompt_cache"),
    ],
)
def test_a_caching_key_only_its_provider_takes(tmp_path: Path, engine: str, key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_org(write_org(tmp_path, identity_chars=100, engine=engine))
    assert refused.value.key == key or key.split(".")[-1] in str(refused.value)


def _parts(message: dict[str, Any]) -> list[tuple[str, bool]]:
    content = message["content"]
    if isinstance(content, list):
        return [(p["text"], "prompt_cache_breakpoint" in p) for p in content]
    return [(content or "", False)]


def _prefixes(request: Recorded) -> list[str]:
    """The request's text before each of its breakpoints, in order."""
    text, found = "", []
    for message in json.loads(request.body)["messages"]:
        for part, marked in _parts(message):
            text += part
            if marked:
                found.append(text)
    return found


def _whole(request: Recorded) -> str:
    messages = json.loads(request.body)["messages"]
    return "".join(part for message in messages for part, _ in _parts(message))


def _billed(entries: list[TranscriptEntry]) -> float:
    config = EngineConfig(kind="openai", model="gpt-5.6-sim")
    # Every rate OpenAI bills is set: whatever the library has for the model is not used.
    row = price_for(config, PriceConfig(1.25, 0.125, cache_write=1.5625, output=10))
    assert row is not None and "gpt-5.6-sim" in PRICES
    return sum(bill(e.usage, row, "openai").usd for e in entries if e.usage is not None)


async def test_at_human_pace_explicit_breakpoints_are_read_at_the_next_turn(
    tmp_path: Path,
) -> None:
    gaps = [840.0, 1500.0, 600.0, 1200.0, 900.0]
    entries, requests = await paced_session(tmp_path, openai_engine("auto"), gaps)

    assert all(openai_errors(r.body) == [] for r in requests)
    bodies = [json.loads(r.body) for r in requests]
    assert all(b["prompt_cache_options"] == {"mode": "explicit", "ttl": "30m"} for b in bodies)
    assert all("prompt_cache_retention" not in b for b in bodies)
    prefixes = [_prefixes(r) for r in requests]
    assert all(1 <= len(p) <= 4 for p in prefixes)
    # The system's breakpoints hold the same text in every request; the
    # conversation's last one is where the next request's prefix starts.
    assert len({tuple(p[:-1]) for p in prefixes}) == 1
    for request, after in itertools.pairwise(requests):
        assert _whole(after).startswith(_prefixes(request)[-1])

    usage = [e.usage for e in entries]
    assert all(u is not None for u in usage)
    assert usage[0] is not None and usage[0].cache_write_tokens > 0
    assert usage[0].cached_input_tokens == 0
    for before, now in itertools.pairwise(usage):
        assert before is not None and now is not None
        # Everything the previous request sent is read; only the new tail is written.
        assert now.cached_input_tokens >= before.input_tokens - 1
        assert 0 < now.cache_write_tokens < before.input_tokens
    assert [e.cache.verdict for e in entries[1:] if e.cache] == ["hit"] * 4
    assert [e.cache.ttl for e in entries if e.cache] == ["30m"] * 5
    # Cost, to the provider's billing: fresh, read, written and output tokens.
    recorded = sum(e.cost.usd for e in entries if e.cost is not None)
    assert recorded == pytest.approx(_billed(entries), rel=1e-3)


async def test_turns_a_day_apart_are_not_written_for_nobody_to_read(tmp_path: Path) -> None:
    entries, requests = await paced_session(
        tmp_path, openai_engine("auto"), [40000.0, 50000.0, 30000.0]
    )
    bodies = [json.loads(r.body) for r in requests]
    # The first turn has seen no gap and writes; once the pace is known, nothing is.
    assert [b["prompt_cache_options"] for b in bodies] == [
        {"mode": "explicit", "ttl": "30m"},
        {"mode": "explicit"},
        {"mode": "explicit"},
    ]
    assert [len(_prefixes(r)) for r in requests][1:] == [0, 0]
    assert [e.usage.cache_write_tokens for e in entries[1:] if e.usage] == [0, 0]
    checks = [e.cache for e in entries if e.cache]
    assert [c.ttl for c in checks] == ["30m", "uncached", "uncached"]
    assert checks[1].ttl_reason == "uncached: median gap 11.1 h over 1 turn(s)"
    # The switch is what the provider was asked, not a prefix the compiler moved.
    assert checks[1].cause is not None
    assert checks[1].cause.startswith("the cache lifetime changed from 30m to uncached")
    # Uncached turns pay the input price for every token, and nothing more.
    for entry in entries[1:]:
        assert entry.usage is not None and entry.cost is not None
        plain = entry.usage.input_tokens * 1.25 + entry.usage.output_tokens * 10
        assert entry.cost.usd == pytest.approx(plain / 1e6, rel=1e-3)


async def test_an_older_model_keeps_its_prefix_a_day_at_no_charge(tmp_path: Path) -> None:
    gaps = [3600.0, 7200.0, 3600.0]
    auto, requests = await paced_session(
        tmp_path / "auto", openai_engine("auto", "gpt-5.1-sim"), gaps
    )
    implicit, plain = await paced_session(
        tmp_path / "implicit", openai_engine("implicit", "gpt-5.1-sim"), gaps
    )
    assert all(openai_errors(r.body) == [] for r in requests + plain)
    assert all(json.loads(r.body)["prompt_cache_retention"] == "24h" for r in requests)
    assert all("prompt_cache_retention" not in json.loads(r.body) for r in plain)
    assert all("prompt_cache_options" not in json.loads(r.body) for r in requests + plain)
    assert [e.cache.verdict for e in auto[1:] if e.cache] == ["hit"] * 2
    # In memory, an hour's gap outlives the prefix.
    assert [e.cache.verdict for e in implicit[1:] if e.cache] == ["provider-miss"] * 2
    assert all(e.usage is not None and e.usage.cache_write_tokens == 0 for e in auto + implicit)
