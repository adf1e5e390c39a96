"""What a call costs: price rows from the library and [prices], bills from the
provider's usage, and where operators read them (runs show, stats cost, check)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import anyio.to_thread
import genai_prices
import httpx
import msgspec
import pytest
from genai_prices import data_snapshot
from genai_prices.types import (
    ClauseEquals,
    ConditionalPrice,
    ModelInfo,
    ModelPrice,
    StartDateConstraint,
)
from harness import Cli, ManualClock, daemon_in_process
from httpx_sse import ServerSentEvent
from orgs import simulated_engine, write_org
from otlp import collector
from prometheus import free_port, promtool
from simulator import Bent, Reply, Simulator

from rosterd import ConfigError
from rosterd.engines import AnthropicEngine, OpenAIEngine
from rosterd.org import EngineConfig, PriceConfig, load_org
from rosterd.pricing import bill, price_for
from rosterd.protocol import Price, Usage

pytestmark = pytest.mark.anyio


def test_the_library_prices_a_known_model_and_the_org_overrides_it() -> None:
    sonnet = price_for(EngineConfig(kind="anthropic", model="claude-sonnet-4-5"), None)
    assert sonnet is not None and sonnet.source == "genai-prices"
    assert (sonnet.input, sonnet.cached_input, sonnet.output) == (3.0, 0.3, 15.0)
    assert (sonnet.cache_write_5m, sonnet.cache_write_1h) == (3.75, 6.0)
    cheaper = price_for(
        EngineConfig(kind="anthropic", model="claude-sonnet-4-5"), PriceConfig(input=2.0)
    )
    assert cheaper is not None and (cheaper.input, cheaper.output) == (2.0, 15.0)


def test_a_missing_cache_rate_follows_the_provider_s_published_rule() -> None:
    local = EngineConfig(kind="anthropic", model="my-model", base_url="http://127.0.0.1:1")
    price = price_for(local, PriceConfig(input=4.0, output=20.0))
    assert price is not None and price.source == "config"
    assert (price.cache_write_5m, price.cache_write_1h, price.cached_input) == (5.0, 8.0, 4.0)
    assert "1-hour cache write = 2x input (Anthropic)" in price.rules
    openai = price_for(
        EngineConfig(kind="openai", model="m", base_url="http://127.0.0.1:1/v1"),
        PriceConfig(input=2.0, cached_input=0.2, output=8.0),
    )
    assert openai is not None and openai.cache_write == 2.5
    assert openai.rules == ("explicit cache write = 1.25x input (OpenAI)",)


def test_a_model_without_an_input_or_output_rate_has_no_price() -> None:
    local = EngineConfig(kind="openai", model="llama", base_url="http://127.0.0.1:8080/v1")
    assert price_for(local, None) is None
    assert price_for(local, PriceConfig(input=1.0)) is None
    echo = price_for(EngineConfig(), None)
    assert echo is not None and echo.output == 0.0 and echo.source == "echo"


def test_a_bill_is_the_price_table_applied_to_the_raw_usage() -> None:
    price = price_for(
        EngineConfig(kind="anthropic", model="x", base_url="http://127.0.0.1:1"),
        PriceConfig(input=3, cached_input=0.3, cache_write_5m=3.75, output=15),
    )
    assert price is not None
    # Anthropic's usage: 200 fresh, 5,000 read from the cache, 1,000 written, 300 out.
    raw = {
        "input_tokens": 200,
        "cache_read_input_tokens": 5000,
        "cache_creation_input_tokens": 1000,
    }
    usage = Usage(
        input_tokens=raw["input_tokens"] + raw["cache_read_input_tokens"] + 1000,
        cached_input_tokens=5000,
        cache_write_tokens=1000,
        output_tokens=300,
    )
    expected = (200 * 3 + 5000 * 0.3 + 1000 * 3.75 + 300 * 15) / 1e6
    assert bill(usage, price, "anthropic").usd == pytest.approx(expected, rel=1e-3)
    # OpenAI's: prompt_tokens holds the cached and the written ones.
    openai = price_for(
        EngineConfig(kind="openai", model="y", base_url="http://127.0.0.1:1/v1"),
        PriceConfig(input=2, cached_input=0.2, cache_write=2.5, output=8),
    )
    assert openai is not None
    usage = Usage(
        input_tokens=10_000, cached_input_tokens=6000, cache_write_tokens=3000, output_tokens=50
    )
    expected = (1000 * 2 + 6000 * 0.2 + 3000 * 2.5 + 50 * 8) / 1e6
    assert bill(usage, openai, "openai").usd == pytest.approx(expected, rel=1e-3)


def test_a_tier_applies_past_its_start_as_the_library_says_and_org_rates_stay_flat() -> None:
    sol = EngineConfig(kind="openai", model="gpt-5.6-sol")
    for tokens in (272_000, 272_001):
        price = price_for(sol, None, input_tokens=tokens)
        assert price is not None
        usage = Usage(input_tokens=tokens, cached_input_tokens=2000, output_tokens=500)
        counts = genai_prices.Usage(input_tokens=tokens, cache_read_tokens=2000, output_tokens=500)
        library = genai_prices.calc_price(counts, "gpt-5.6-sol", provider_id="openai")
        assert bill(usage, price, "openai").usd == pytest.approx(float(library.total_price))
    base, past = price_for(sol, None), price_for(sol, None, input_tokens=272_001)
    assert base is not None and past is not None and past.tier_above == 272_000
    assert (base.tier_above, past.input, past.output) == (None, 2 * base.input, 1.5 * base.output)
    # [prices] replaces a rate, tiers and all; the others keep the library's tiers.
    mixed = price_for(sol, PriceConfig(input=4.0), input_tokens=300_000)
    assert mixed is not None and (mixed.input, mixed.output) == (4.0, past.output)
    # A row recorded before tiers reads as the base tier.
    recorded = msgspec.to_builtins(past)
    del recorded["tier_above"]
    assert msgspec.convert(recorded, Price) == msgspec.structs.replace(past, tier_above=None)


@pytest.mark.parametrize(
    ("row", "key"),
    [
        ("input = -1\noutput = 2", "prices.sim-1.input"),
        ('input = "cheap"', "prices.sim-1.input"),
        ("inputs = 1", "prices.sim-1.inputs"),
        # TOML's inf and nan: a bill at either is inf or nan, which JSON
        # cannot hold, so the call's transcript entry would not read back.
        ("input = 1\noutput = inf", "prices.sim-1.output"),
        ("input = nan\noutput = 1", "prices.sim-1.input"),
        ("input = 1\noutput = 1\ncached_input = 1e300", "prices.sim-1.cached_input"),
    ],
)
def test_a_bad_price_is_refused_naming_its_key(tmp_path: Path, row: str, key: str) -> None:
    prices = f'[prices."sim-1"]\n{row}'
    write_org(tmp_path, identity_chars=100, purpose_chars=10, sections=prices)
    with pytest.raises(ConfigError) as refused:
        load_org(tmp_path)
    assert refused.value.key == key


def org_on(root: Path, sim: Simulator, prices: str = "") -> Path:
    engine = simulated_engine(sim, "anthropic")
    return write_org(
        root,
        workers=2,
        channels=2,
        identity_chars=300,
        purpose_chars=100,
        engine=engine,
        sections=prices,
    )


async def test_every_call_carries_its_cost_and_operators_read_it(tmp_path: Path, cli: Cli) -> None:
    prices = '\n[prices."sim-1"]\ninput = 3\ncached_input = 0.3\noutput = 15\n'
    state = tmp_path / "state"
    async with Simulator() as sim:
        sim.script(Reply("one"), Reply("two"), Reply("three"))
        org = org_on(tmp_path / "org", sim, prices)
        async with daemon_in_process(org, state) as daemon, await daemon.client() as client:
            opened = await client.session_open("w0", "c0")
            await client.session_send(opened.session, "first")
            await client.session_send(opened.session, "second")
            other = await client.session_open("w1", "c1")
            await client.session_send(other.session, "third")
            shown = await client.runs_show(opened.session)
    calls = [e for e in shown.transcript if e.role == "assistant"]
    for entry in calls:
        assert entry.cost is not None and entry.usage is not None
        usage = entry.usage
        fresh = usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens
        expected = (
            fresh * 3 + usage.cached_input_tokens * 0.3 + usage.cache_write_tokens * 3.75
        ) / 1e6 + usage.output_tokens * 15 / 1e6
        assert entry.cost.usd == pytest.approx(expected, rel=1e-3)
        assert entry.cost.price.rules == ("5-minute cache write = 1.25x input (Anthropic)",
                                          "1-hour cache write = 2x input (Anthropic)")  # fmt: skip
    total = sum(e.cost.usd for e in calls if e.cost is not None)
    # runs show, with the daemon down: each turn's cost, the run's, the row and its rules.
    out = await cli.in_thread("server", "runs", "show", opened.session, "--state", str(state))
    assert f"${total:.6f}" in out and "5-minute cache write = 1.25x input" in out
    # stats cost, by worker and as JSON.
    by_worker = ["server", "stats", "cost", "--by", "worker", "--state", str(state), "--json"]
    rows = {row["group"]: row for row in json.loads(await cli.in_thread(*by_worker))}
    assert set(rows) == {"w0", "w1"} and rows["w0"]["calls"] == 2
    assert rows["w0"]["cost_usd"] == pytest.approx(total) and rows["w0"]["unpriced_calls"] == 0
    later = ["server", "stats", "cost", "--since", "2999-01-01", "--state", str(state)]
    assert "no engine call reported usage" in await cli.in_thread(*later)


async def test_an_unpriced_model_costs_unknown_never_0_and_check_warns(
    tmp_path: Path, cli: Cli
) -> None:
    state = tmp_path / "state"
    async with Simulator() as sim:
        org = org_on(tmp_path / "org", sim)
        async with daemon_in_process(org, state) as daemon, await daemon.client() as client:
            opened = await client.session_open("w0", "c0")
            await client.session_send(opened.session, "hello")
    out = await cli.in_thread("server", "runs", "show", opened.session, "--state", str(state))
    assert "unknown" in out and "$0.000000" not in out
    by_model = ["server", "stats", "cost", "--by", "model", "--state", str(state)]
    assert "0.000000 + unknown" in await cli.in_thread(*by_model)
    code, _, err = await anyio.to_thread.run_sync(cli, "check", "--org", str(org))
    assert code == 0
    assert "warning: model 'sim-1' has no price" in err and '[prices."sim-1"]' in err


@contextmanager
def library_serving(provider_id: str, url: str, *models: ModelInfo) -> Iterator[None]:
    """genai-prices' own data, with *provider_id*'s models, and *models*,
    also found at *url* (as at a proxy of that provider, provider id
    ``sim``): the library's public snapshot hook."""
    bundled = data_snapshot.get_snapshot()
    provider = data_snapshot.find_provider_by_id(bundled.providers, provider_id)
    assert provider is not None
    proxy = dataclasses.replace(
        provider, id="sim", api_pattern=re.escape(url), models=[*models, *provider.models]
    )
    providers = [proxy, *bundled.providers]
    data_snapshot.set_custom_snapshot(data_snapshot.DataSnapshot(providers, False))
    try:
        yield
    finally:
        data_snapshot.set_custom_snapshot(None)


def input_usage(kind: str, cached: int, fresh: int) -> dict[str, object]:
    """A reply's input usage fields in *kind*'s shape: *cached* tokens read
    from the cache and *fresh* ones, nothing written."""
    if kind == "anthropic":
        return {"input_tokens": fresh, "cache_read_input_tokens": cached,
                "cache_creation_input_tokens": 0}  # fmt: skip
    details = {"cached_tokens": cached, "cache_write_tokens": 0}
    return {"prompt_tokens": cached + fresh, "prompt_tokens_details": details}


def library_cost(usage: Usage, model: str, provider_id: str, at: datetime | None = None) -> float:
    """What genai-prices itself bills *usage* of *model* at *provider_id*,
    for a call at *at* (``None``: now)."""
    counts = genai_prices.Usage(
        input_tokens=usage.input_tokens, cache_read_tokens=usage.cached_input_tokens,
        cache_write_tokens=usage.cache_write_tokens, output_tokens=usage.output_tokens,
    )  # fmt: skip
    library = genai_prices.calc_price(
        counts, model, provider_id=provider_id, genai_request_timestamp=at
    )
    return float(library.total_price)


@pytest.mark.parametrize(
    ("kind", "model", "threshold"),
    [("openai", "gpt-5.6-sol", 272_000), ("anthropic", "claude-haiku-5-5", 100_000)],
)
async def test_a_call_past_a_long_context_tier_is_billed_at_that_tier(
    tmp_path: Path, cli: Cli, kind: str, model: str, threshold: int
) -> None:
    state = tmp_path / "state"
    async with Simulator() as sim:
        url = sim.anthropic_url if kind == "anthropic" else sim.openai_url
        org = write_org(tmp_path / "org", identity_chars=300, purpose_chars=100,
                        engine=simulated_engine(sim, kind, model=model))  # fmt: skip
        # Below the tier, then past it with most of the input cached: the
        # tier counts the whole input, as the library does, not the fresh part.
        sim.script(Bent(input_usage(kind, 0, threshold - 2000)),
                   Bent(input_usage(kind, threshold, 1000)))  # fmt: skip
        with library_serving(kind, url):
            async with daemon_in_process(org, state) as daemon, await daemon.client() as client:
                opened = await client.session_open("w0", "c0")
                await client.session_send(opened.session, "short")
                await client.session_send(opened.session, "long")
                shown = await client.runs_show(opened.session)
            below, past = [e for e in shown.transcript if e.role == "assistant"]
            for entry in (below, past):
                assert entry.usage is not None and entry.cost is not None
                library = library_cost(entry.usage, model, kind)
                assert entry.cost.usd == pytest.approx(library, rel=1e-9)
    assert below.cost is not None and past.cost is not None
    assert (below.cost.price.tier_above, past.cost.price.tier_above) == (None, threshold)
    total = below.cost.usd + past.cost.usd
    out = await cli.in_thread("server", "runs", "show", opened.session, "--state", str(state))
    assert f"${total:.6f}" in out and f"over {threshold:,} input tokens" in out
    by_model = ["server", "stats", "cost", "--by", "model", "--state", str(state), "--json"]
    (row,) = json.loads(await cli.in_thread(*by_model))
    assert row["group"] == model and row["cost_usd"] == pytest.approx(total)


def rates(input_mtok: int, output_mtok: int) -> ModelPrice:
    """A library price list: cached reads at a tenth of input, writes at 1.25x."""
    return ModelPrice(
        input_mtok=Decimal(input_mtok), cache_read_mtok=Decimal(input_mtok) / 10,
        cache_write_mtok=Decimal(input_mtok) * Decimal("1.25"), output_mtok=Decimal(output_mtok),
    )  # fmt: skip


async def test_a_call_is_billed_at_the_library_s_price_list_in_effect_when_it_was_made(
    tmp_path: Path,
) -> None:
    change = datetime(2027, 2, 1, tzinfo=UTC)
    # Two price lists, the second from the day of the change, as the
    # library's data has them for a model whose prices changed.
    dated = ModelInfo(
        id="sim-dated",
        match=ClauseEquals("sim-dated"),
        prices=[
            ConditionalPrice(prices=rates(3, 15)),
            ConditionalPrice(StartDateConstraint(change.date()), prices=rates(6, 30)),
        ],
    )
    clock = ManualClock(change.timestamp() - 60)
    state = tmp_path / "state"
    async with Simulator() as sim:
        org = write_org(tmp_path / "org", identity_chars=300, purpose_chars=100,
                        engine=simulated_engine(sim, "anthropic", model="sim-dated"))  # fmt: skip
        sim.script(Bent(input_usage("anthropic", 0, 1000)), Bent(input_usage("anthropic", 0, 1000)))
        with library_serving("anthropic", sim.anthropic_url, dated):
            daemon = daemon_in_process(org, state, clock=clock)
            async with daemon as running, await running.client() as client:
                opened = await client.session_open("w0", "c0")
                await client.session_send(opened.session, "the day before")
                clock.advance(120)
                await client.session_send(opened.session, "the day of the change")
                shown = await client.runs_show(opened.session)
            before, after = [e for e in shown.transcript if e.role == "assistant"]
            for entry in (before, after):
                assert entry.usage is not None and entry.cost is not None
                at = datetime.fromtimestamp(entry.at, UTC)
                library = library_cost(entry.usage, "sim-dated", "sim", at)
                assert entry.cost.usd == pytest.approx(library, rel=1e-9)
    assert before.cost is not None and after.cost is not None
    assert (before.cost.price.input, before.cost.price.output) == (3.0, 15.0)
    assert (after.cost.price.input, after.cost.price.output) == (6.0, 30.0)


# Usage fields as providers and proxies have bent them: a negative count, a
# fraction, and counts past any model's (as a float, and as a JSON integer
# wider than int64); then a whole number sent as a float, which is a count.
BENT: dict[str, tuple[dict[str, object], ...]] = {
    "openai": (
        {"prompt_tokens_details": {"cached_tokens": -4000}},
        {"completion_tokens": 12.5},
        {"prompt_tokens": 1e30},
        {"completion_tokens": 10**30},
        {"prompt_tokens_details": {"cached_tokens": 12.0}},
    ),
    "anthropic": (
        {"cache_read_input_tokens": -4000},
        {"input_tokens": 7.5},
        {"cache_creation_input_tokens": 1e30},
        {"input_tokens": 10**30},
        {"cache_read_input_tokens": 12.0},
    ),
}


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_usage_a_provider_bends_is_unknown_and_fails_neither_a_turn_nor_a_metric(
    tmp_path: Path, cli: Cli, kind: str
) -> None:
    state, listen = tmp_path / "state", f"127.0.0.1:{free_port()}"
    async with Simulator() as sim, collector() as otlp:
        sections = (
            f'[prices."sim-1"]\ninput = 3\noutput = 15\n[metrics]\nlisten = "{listen}"\n'
            f'[telemetry]\notlp_endpoint = "{otlp.url}"\n'
        )
        engine = simulated_engine(sim, kind)
        org = write_org(tmp_path / "org", identity_chars=300, purpose_chars=100, engine=engine,
                        sections=sections)  # fmt: skip
        sim.script(*(Bent(fields) for fields in BENT[kind]))
        async with daemon_in_process(org, state) as daemon, await daemon.client() as client:
            opened = await client.session_open("w0", "c0")
            for n in range(len(BENT[kind])):
                reply = await client.session_send(opened.session, f"question {n}")
                assert reply.text.startswith(f"Reply {n + 1}:")
            shown = await client.runs_show(opened.session)
            async with httpx.AsyncClient() as http:
                exposition = (await http.get(f"http://{listen}/metrics")).content
    *bent, whole = [e for e in shown.transcript if e.role == "assistant"]
    # Counts that are no token counts are no usage at all: unknown, not billed.
    assert [(e.usage, e.cost) for e in bent] == [(None, None)] * len(bent)
    assert whole.usage is not None and whole.usage.cached_input_tokens == 12
    assert whole.cost is not None and whole.cost.usd > 0
    checked = promtool("check", "metrics", stdin=exposition)
    assert (checked.returncode, checked.stderr) == (0, b"")
    assert len(otlp.named("chat sim-1")) == len(bent) + 1
    stats = ["server", "stats", "cost", "--state", str(state), "--json"]
    (row,) = json.loads(await cli.in_thread(*stats))
    assert row["calls"] == 1 and row["cost_usd"] == whole.cost.usd


async def _reply_of(kind: str, events: list[tuple[str, dict[str, object]]]) -> Usage:
    """The usage an engine of *kind* reads from a stream of these raw events."""
    config = EngineConfig(kind=kind, model="m", base_url="http://127.0.0.1:1")  # type: ignore[arg-type]
    engine: AnthropicEngine | OpenAIEngine = (
        AnthropicEngine(config, api_key=None)
        if kind == "anthropic"
        else OpenAIEngine(config, api_key=None)
    )

    async def ignore(piece: str) -> None:
        pass

    stream = engine.parser(ignore)
    for name, data in events:
        await stream.feed(ServerSentEvent(event=name, data=json.dumps(data)))
    if kind == "openai":
        await stream.feed(ServerSentEvent(data="[DONE]"))
    await engine.aclose()
    usage = stream.reply().usage
    assert usage is not None
    return usage


async def test_a_bill_from_the_provider_s_own_usage_fields() -> None:
    """Streams shaped like the providers' documented responses, read by the
    engines and billed, against the price table applied by hand."""
    rates = PriceConfig(input=3, cached_input=0.3, cache_write_5m=3.75, cache_write_1h=6, output=15)
    claude = price_for(EngineConfig(kind="anthropic", model="x", base_url="http://h"), rates)
    assert claude is not None
    # Anthropic: input_tokens is what came after the last cache hit or write;
    # the writes split by lifetime.
    usage = await _reply_of(
        "anthropic",
        [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_01",
                        "usage": {
                            "input_tokens": 50,
                            "cache_read_input_tokens": 8000,
                            "cache_creation_input_tokens": 1500,
                            "cache_creation": {
                                "ephemeral_5m_input_tokens": 500,
                                "ephemeral_1h_input_tokens": 1000,
                            },
                            "output_tokens": 1,
                        },
                    },
                },
            ),
            ("message_delta", {"type": "message_delta", "usage": {"output_tokens": 300}}),
            ("message_stop", {"type": "message_stop"}),
        ],
    )
    by_hand = (50 * 3 + 8000 * 0.3 + 500 * 3.75 + 1000 * 6 + 300 * 15) / 1e6
    assert bill(usage, claude, "anthropic").usd == pytest.approx(by_hand, rel=1e-3)

    gpt = price_for(
        EngineConfig(kind="openai", model="y", base_url="http://h/v1"),
        PriceConfig(input=1.25, cached_input=0.125, cache_write=1.5625, output=10),
    )
    assert gpt is not None
    # OpenAI: prompt_tokens holds the cached and the written tokens.
    usage = await _reply_of(
        "openai",
        [
            (
                "message",
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 12000,
                        "completion_tokens": 200,
                        "total_tokens": 12200,
                        "prompt_tokens_details": {
                            "cached_tokens": 8000,
                            "cache_write_tokens": 3000,
                        },
                    },
                },
            )
        ],
    )
    by_hand = (1000 * 1.25 + 8000 * 0.125 + 3000 * 1.5625 + 200 * 10) / 1e6
    assert bill(usage, gpt, "openai").usd == pytest.approx(by_hand, rel=1e-3)
