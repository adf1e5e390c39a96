"""What an engine call costs: a price row per model, and the bill from usage.

Rates come from the price library (pydantic's genai-prices, whose data
ships in its wheel and works offline), with ``[prices."<model>"]`` over
them key by key; a model the library does not know has only what the org
gives it. Where the library lists several prices for a model (prices that
changed on a date, off-peak hours), a call is billed at the list the
library itself picks for the time the call was recorded. Where the
library's rates are tiered (long-context prices), a call is billed at the
tier its input tokens reach, cached and written ones included, and its
row names the tier. Where a row lacks a cache rate, the provider's
published rule supplies it (from the call's input rate), and the row
says so:

- Anthropic: a 5-minute cache write is 1.25x input, a 1-hour one 2x;
- OpenAI: an explicit cache write is 1.25x input;
- a cached read with no rate of its own is billed as input.

A row without an input or an output rate is no price at all: the call's
cost is unknown, never 0. The echo engine is free.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from ..org import EngineConfig, PriceConfig
from ..protocol import CallCost, Price, Usage

if TYPE_CHECKING:
    from genai_prices.types import ModelPrice

log = logging.getLogger("rosterd.pricing")

_RATES = ("input", "cached_input", "cache_write_5m", "cache_write_1h", "cache_write", "output")
# The library's price keys, by our rate names.
_LIBRARY_KEYS = {
    "input": "input_mtok",
    "cached_input": "cache_read_mtok",
    "cache_write_5m": "cache_write_mtok",
    "cache_write_1h": "cache_write_1h_mtok",
    "cache_write": "cache_write_mtok",
    "output": "output_mtok",
}
# Where a rate is missing: (rate, multiple of input, the rule as runs show says it).
_RULES = {
    "anthropic": (
        ("cache_write_5m", 1.25, "5-minute cache write = 1.25x input (Anthropic)"),
        ("cache_write_1h", 2.0, "1-hour cache write = 2x input (Anthropic)"),
    ),
    "openai": (("cache_write", 1.25, "explicit cache write = 1.25x input (OpenAI)"),),
}
_DEFAULT_HOSTS = {"anthropic": "api.anthropic.com", "openai": "api.openai.com"}


class Tiered(NamedTuple):
    """A library rate that depends on the call's input tokens: ``base`` up
    to the first tier, then each ``(start, rate)`` of ``tiers`` (ascending)
    once the input passes its start."""

    base: float
    tiers: tuple[tuple[int, float], ...]


Rates = Mapping[str, float | Tiered]


class Schedule(NamedTuple):
    """A model's rates in the library: one set per price list it has, and
    the library's own choice of the list in effect at a time (its index)."""

    rates: tuple[Rates, ...]
    in_effect: Callable[[datetime], int]

    def at(self, when: float) -> tuple[int, Rates]:
        """The index and the rates of the list in effect at *when* (seconds
        since the epoch)."""
        listed = self.in_effect(datetime.fromtimestamp(when, UTC))
        return listed, self.rates[listed]


# What a model the library does not price has from it, and the echo engine.
_UNLISTED = Schedule(({},), lambda when: 0)

Library = Callable[[EngineConfig], Schedule]


def price_for(
    config: EngineConfig, override: PriceConfig | None, input_tokens: int = 0
) -> Price | None:
    """The price row of *config*'s model as the library prices it now, for
    a call of *input_tokens* (its whole input: fresh, cached and written),
    or ``None`` when it has none. With no input tokens it is the base row,
    below every tier."""
    schedule = _schedule_of(config, _library_schedule)
    return _row(config, override, schedule.at(time.time())[1], input_tokens)


def _schedule_of(config: EngineConfig, library: Library) -> Schedule:
    """*library*'s price lists for *config*'s model. The echo engine is free
    (``_row``): the library, which knows nothing of it, is never loaded for it."""
    return _UNLISTED if config.kind == "echo" else library(config)


def _row(
    config: EngineConfig, override: PriceConfig | None, known: Rates, input_tokens: int
) -> Price | None:
    """The price row of *config*'s model from the library's *known* rates
    and *override* over them, for a call of *input_tokens*."""
    if config.kind == "echo":
        return Price(config.kind, "echo", 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    source = "genai-prices" if known else "config"
    given = {
        rate: value
        for rate in _RATES
        if override is not None and (value := getattr(override, rate)) is not None
    }
    # An org's rate replaces the library's, tiers and all: [prices] rows are flat.
    rates, tier = _at({r: v for r, v in known.items() if r not in given}, input_tokens)
    rates.update(given)
    if "input" not in rates or "output" not in rates:
        return None
    rules: list[str] = []
    for rate, times, rule in _RULES.get(config.kind, ()):
        if rate not in rates:
            rates[rate] = rates["input"] * times
            rules.append(rule)
    if "cached_input" not in rates:
        rates["cached_input"] = rates["input"]
        rules.append("cached input billed as input (no cached rate)")
    return Price(
        model=config.model,
        source=source,
        rules=tuple(rules),
        tier_above=tier,
        **{rate: rates.get(rate, rates["input"]) for rate in _RATES},
    )


def _at(rates: Rates, input_tokens: int) -> tuple[dict[str, float], int | None]:
    """*rates* for a call of *input_tokens*, and the start of the tier they
    are from (``None``: the base rates).

    This is genai-prices' rule for its ``TieredPrices``: a tier applies
    once the call's input tokens are more than its start, and then to the
    whole call, not only the tokens past the start. It is restated here
    because the library's own helper for it is not public (and has been
    renamed between releases); tests/test_pricing.py holds the bills to the
    library's ``calc_price`` on both sides of a tier.
    """
    flat: dict[str, float] = {}
    for rate, value in rates.items():
        if not isinstance(value, Tiered):
            flat[rate] = value
            continue
        flat[rate] = value.base
        for start, price in value.tiers:
            if input_tokens > start:
                flat[rate] = price
    return flat, _reached(rates, input_tokens)


def _reached(rates: Rates, input_tokens: int) -> int | None:
    """The start of the highest tier, of any of *rates*, that a call of
    *input_tokens* passes (``None``: none). Every lower start is passed
    too, so it fixes the tier each rate is at: calls with the same value
    are billed from the same row."""
    starts = (
        start
        for value in rates.values()
        if isinstance(value, Tiered)
        for start, _ in value.tiers
        if input_tokens > start
    )
    return max(starts, default=None)


def bill(usage: Usage, price: Price, kind: str) -> CallCost:
    """*usage* at *price*: fresh input, cache reads, cache writes and output.

    ``input_tokens`` counts the cached and the written ones too. Anthropic's
    writes are billed by lifetime (``cache_write_1h_tokens`` at the 1-hour
    rate, the rest at the 5-minute one); other providers' at ``cache_write``.
    """
    written = usage.cache_write_tokens
    fresh = max(usage.input_tokens - usage.cached_input_tokens - written, 0)
    if kind == "anthropic":
        hour = min(usage.cache_write_1h_tokens, written)
        writes = (written - hour) * price.cache_write_5m + hour * price.cache_write_1h
    else:
        writes = written * price.cache_write
    micro = (
        fresh * price.input
        + usage.cached_input_tokens * price.cached_input
        + writes
        + usage.output_tokens * price.output
    )
    return CallCost(usd=micro / 1_000_000, price=price)


class Pricing:
    """Price rows by engine, org override, the library's price list in
    effect and the tier a call's input tokens reach, each made once; the
    library is asked once per engine."""

    def __init__(self, library: Library | None = None) -> None:
        self._library = library or _library_schedule
        self._schedules: dict[EngineConfig, Schedule] = {}
        self._rows: dict[
            tuple[EngineConfig, PriceConfig | None, int, int | None], Price | None
        ] = {}

    def __repr__(self) -> str:
        return f"Pricing({len(self._schedules)} engines, {len(self._rows)} rows)"

    def _schedule(self, config: EngineConfig) -> Schedule:
        if config not in self._schedules:
            self._schedules[config] = _schedule_of(config, self._library)
        return self._schedules[config]

    def cost(
        self,
        config: EngineConfig,
        prices: Mapping[str, PriceConfig],
        usage: Usage | None,
        at: float,
    ) -> CallCost | None:
        """What a call of *config* reporting *usage* at *at* (seconds since
        the epoch) cost; ``None`` when unknown (no usage, or no price for
        the model)."""
        if usage is None:
            return None
        override = prices.get(config.model)
        listed, known = self._schedule(config).at(at)
        key = (config, override, listed, _reached(known, usage.input_tokens))
        if key not in self._rows:
            self._rows[key] = _row(config, override, known, usage.input_tokens)
        price = self._rows[key]
        return bill(usage, price, config.kind) if price is not None else None


def _library_schedule(config: EngineConfig) -> Schedule:
    """The price lists genai-prices has for *config*'s model, or none."""
    # Loaded on the first priced call: the CLI and a free engine never pay for it.
    from genai_prices import data_snapshot
    from genai_prices.types import ModelPrice

    host = urlsplit(config.base_url).hostname if config.base_url else _DEFAULT_HOSTS[config.kind]
    snapshot = data_snapshot.get_snapshot()
    try:
        if host == _DEFAULT_HOSTS.get(config.kind):
            _, model = snapshot.find_provider_model(config.model, None, config.kind, None)
        else:
            _, model = snapshot.find_provider_model(config.model, None, None, config.base_url)
    except LookupError:
        return _UNLISTED
    lists = (
        [model.prices]
        if isinstance(model.prices, ModelPrice)
        else [listed.prices for listed in model.prices]
    )

    def in_effect(when: datetime) -> int:
        # The library picks by each list's constraint (a start date, hours
        # of the day); which of the lists it picked is all we need of it.
        return lists.index(model.get_prices(when))

    return Schedule(tuple(_rates_of(prices) for prices in lists), in_effect)


def _rates_of(prices: ModelPrice) -> dict[str, float | Tiered]:
    """The rates of one of the library's price lists."""
    from genai_prices.types import TieredPrices

    rates: dict[str, float | Tiered] = {}
    for rate, key in _LIBRARY_KEYS.items():
        value = getattr(prices, key, None)
        if isinstance(value, TieredPrices):
            tiers = tuple((tier.start, float(tier.price)) for tier in value.tiers)
            rates[rate] = Tiered(float(value.base), tiers)
        elif isinstance(value, Decimal | int | float):
            rates[rate] = float(value)
    return rates
