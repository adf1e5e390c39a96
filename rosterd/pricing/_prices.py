"""What an engine call costs: a price row per model, and the bill from usage.

Rates come from the price library (pydantic's genai-prices, whose data
ships in its wheel and works offline), with ``[prices."<model>"]`` over
them key by key; a model the library does not know has only what the org
gives it. Where a row lacks a cache rate, the provider's published rule
supplies it, and the row says so:

- Anthropic: a 5-minute cache write is 1.25x input, a 1-hour one 2x;
- OpenAI: an explicit cache write is 1.25x input;
- a cached read with no rate of its own is billed as input.

A row without an input or an output rate is no price at all: the call's
cost is unknown, never 0. The echo engine is free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from decimal import Decimal
from urllib.parse import urlsplit

from ..org import EngineConfig, PriceConfig
from ..protocol import CallCost, Price, Usage

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
Library = Callable[[EngineConfig], Mapping[str, float]]


def price_for(
    config: EngineConfig, override: PriceConfig | None, library: Library | None = None
) -> Price | None:
    """The price row of *config*'s model, or ``None`` when it has none."""
    if config.kind == "echo":
        return Price(config.kind, "echo", 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    rates: dict[str, float] = dict((library or _library_rates)(config))
    source = "genai-prices" if rates else "config"
    if override is not None:
        rates.update(
            {rate: value for rate in _RATES if (value := getattr(override, rate)) is not None}
        )
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
        **{rate: rates.get(rate, rates["input"]) for rate in _RATES},
    )


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
    """Price rows by engine and org override, looked up once each."""

    def __init__(self, library: Library | None = None) -> None:
        self._library = library
        self._rows: dict[tuple[EngineConfig, PriceConfig | None], Price | None] = {}

    def __repr__(self) -> str:
        return f"Pricing({len(self._rows)} rows)"

    def cost(
        self, config: EngineConfig, prices: Mapping[str, PriceConfig], usage: Usage | None
    ) -> CallCost | None:
        """What a call of *config* reporting *usage* cost; ``None`` when
        unknown (no usage, or no price for the model)."""
        if usage is None:
            return None
        override = prices.get(config.model)
        key = (config, override)
        if key not in self._rows:
            self._rows[key] = price_for(config, override, self._library)
        price = self._rows[key]
        return bill(usage, price, config.kind) if price is not None else None


def _library_rates(config: EngineConfig) -> dict[str, float]:
    """The base rates genai-prices has for *config*'s model, or none."""
    # Loaded on the first priced call: the CLI and a free engine never pay for it.
    from genai_prices import data_snapshot

    host = urlsplit(config.base_url).hostname if config.base_url else _DEFAULT_HOSTS[config.kind]
    snapshot = data_snapshot.get_snapshot()
    try:
        if host == _DEFAULT_HOSTS.get(config.kind):
            _, model = snapshot.find_provider_model(config.model, None, config.kind, None)
        else:
            _, model = snapshot.find_provider_model(config.model, None, None, config.base_url)
    except LookupError:
        return {}
    prices = model.prices
    if isinstance(prices, list):  # prices that changed over time: the newest
        prices = prices[-1].prices
    rates = {}
    for rate, key in _LIBRARY_KEYS.items():
        value = getattr(prices, key, None)
        value = getattr(value, "base", value)  # tiered: the base tier
        if isinstance(value, Decimal | int | float):
            rates[rate] = float(value)
    return rates
