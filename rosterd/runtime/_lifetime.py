"""What the provider should keep of a session's prefix: chosen per turn.

Anthropic keeps a cached prefix for five minutes after its last use by
default, or an hour on request. A five-minute write costs 1.25x the input
price, an hour's 2x, and a read 0.1x. At human pace (gaps of 5 to 60
minutes) a five-minute entry is gone by the next turn, and every turn pays
for writing the whole conversation again; an hour's entry is read instead.

OpenAI's models before gpt-5.6 cache implicitly and free of charge, for
minutes in memory or up to 24 hours where the model takes
``prompt_cache_retention``; ``auto`` asks for 24 hours there, as a longer
retention costs nothing. The gpt-5.6 family and later take an explicit
contract: breakpoints that live at least 30 minutes, their writes billed at
1.25x input. There ``auto`` weighs writing them against not caching at all
(every token at the input price), which wins only when turns come so far
apart that a written prefix is never read.

``auto`` picks the choice whose expected cost per turn, over the gaps seen
between this session's recent turns (for a session with fewer than two, its
channel's recent messages), is lower: a turn after a gap within the
lifetime reads its prefix, one after a longer gap writes it again. The
choice only decides what the provider keeps: the prefix itself, and so the
compiler's cache verdict, does not change with it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

import msgspec

from ..org import EXPLICIT_CACHE_MODELS, RETENTION_MODELS, EngineConfig
from ..protocol import CacheLifetime

# The gaps a choice weighs: the recent ones, as a channel's pace changes.
RECENT_GAPS = 10
# Per choice: how long an entry lives after its last use (seconds), and the
# price of a turn's prefix when written and when read, as multiples of the
# input price. Not caching writes nothing and reads nothing: all at 1x.
_Costs = Mapping[CacheLifetime, tuple[float, float, float]]
_ANTHROPIC: _Costs = {"5m": (300.0, 1.25, 0.1), "1h": (3600.0, 2.0, 0.1)}
_EXPLICIT: _Costs = {"30m": (1800.0, 1.25, 0.1), "uncached": (0.0, 1.0, 1.0)}
_LABELS: Mapping[CacheLifetime, str] = {
    "5m": "ttl 5m",
    "1h": "ttl 1h",
    "30m": "explicit 30m",
    "uncached": "uncached",
    "implicit": "implicit",
    "24h": "retention 24h",
}


class CachePlan(msgspec.Struct, frozen=True):
    """What a turn's request asks the provider to keep, why, and the
    previous turn's choice; and the id of the session's last reply, which a
    provider that diagnoses misses compares the request with."""

    ttl: CacheLifetime
    reason: str
    previous: CacheLifetime | None = None
    previous_message: str | None = None


def takes_explicit_cache(config: EngineConfig) -> bool:
    """Whether *config*'s model takes OpenAI's explicit caching contract."""
    patterns = config.explicit_cache_models
    return _matches(config.model, EXPLICIT_CACHE_MODELS if patterns is None else patterns)


def plan_cache(
    config: EngineConfig, gaps: Sequence[float], previous: CacheLifetime | None = None
) -> CachePlan | None:
    """The choice for the next request of an engine of *config*, given the
    *gaps* (seconds) between recent turns; ``None`` for an engine without one."""
    if config.kind == "anthropic":
        if config.cache_ttl == "5m" or config.cache_ttl == "1h":
            ttl = config.cache_ttl
            return CachePlan(ttl, f"ttl {ttl}: set in the engine's cache_ttl", previous)
        return _cheapest(_ANTHROPIC, gaps, previous)
    if config.kind != "openai":
        return None
    choice = config.prompt_cache or "auto"
    if choice == "explicit":
        return CachePlan("30m", "explicit 30m: set in the engine's prompt_cache", previous)
    if choice == "implicit":
        return CachePlan("implicit", "implicit: set in the engine's prompt_cache", previous)
    if takes_explicit_cache(config):
        return _cheapest(_EXPLICIT, gaps, previous)
    patterns = config.retention_models
    if _matches(config.model, RETENTION_MODELS if patterns is None else patterns):
        reason = f"retention 24h: {config.model} keeps an implicit prefix a day, writes are free"
        return CachePlan("24h", reason, previous)
    # A compatible server (vLLM, llama.cpp, Ollama) caches as it does: nothing to choose.
    return None


def _cheapest(choices: _Costs, gaps: Sequence[float], previous: CacheLifetime | None) -> CachePlan:
    first = next(iter(choices))
    recent = list(gaps)[-RECENT_GAPS:]
    if not recent:
        return CachePlan(first, f"{_LABELS[first]}: no gap between turns seen yet", previous)
    costs = {choice: _expected_cost(choices[choice], recent) for choice in choices}
    best = min(costs, key=costs.__getitem__)
    median = statistics.median(recent)
    reason = f"{_LABELS[best]}: median gap {_duration(median)} over {len(recent)} turn(s)"
    return CachePlan(best, reason, previous)


def _expected_cost(costs: tuple[float, float, float], gaps: Sequence[float]) -> float:
    """The mean price of a turn's prefix, as a multiple of the input price."""
    lifetime, write, read = costs
    return sum(read if gap <= lifetime else write for gap in gaps) / len(gaps)


def _matches(model: str, patterns: Sequence[str]) -> bool:
    return any(fnmatchcase(model, pattern) for pattern in patterns)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
