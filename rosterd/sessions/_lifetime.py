"""How long the provider should keep a session's prefix: chosen per turn.

Anthropic keeps a cached prefix for five minutes after its last use by
default, or an hour on request. A five-minute write costs 1.25x the input
price, an hour's 2x, and a read 0.1x. At human pace (gaps of 5 to 60
minutes) a five-minute entry is gone by the next turn, and every turn pays
for writing the whole conversation again; an hour's entry is read instead.

``auto`` picks the lifetime whose expected cost per turn, over the gaps
seen between this session's recent turns (for a session with fewer than
two, its channel's recent messages), is lower: a turn after a gap within
the lifetime reads its prefix, one after a longer gap writes it again.
The choice only decides what the provider keeps: the prefix itself, and
so the compiler's cache verdict, does not change with it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import msgspec

from ..org import EngineConfig
from ..protocol import CacheTtl

__all__ = ("RECENT_GAPS", "CachePlan", "plan_ttl")

# The gaps a choice weighs: the recent ones, as a channel's pace changes.
RECENT_GAPS = 10
# Per lifetime: how long an entry lives, and the price of a write, as
# multiples of the input price (a read is 0.1x either way).
_LIFETIMES: dict[CacheTtl, tuple[float, float]] = {"5m": (300.0, 1.25), "1h": (3600.0, 2.0)}
_READ = 0.1


class CachePlan(msgspec.Struct, frozen=True):
    """The lifetime a turn's request asks for, why, and the previous turn's."""

    ttl: CacheTtl
    reason: str
    previous: CacheTtl | None = None


def plan_ttl(
    config: EngineConfig, gaps: Sequence[float], previous: CacheTtl | None = None
) -> CachePlan | None:
    """The lifetime for the next request of an engine of *config*, given the
    *gaps* (seconds) between recent turns; ``None`` for an engine without one."""
    if config.kind != "anthropic":
        return None
    choice = config.cache_ttl or "auto"
    if choice != "auto":
        return CachePlan(choice, f"ttl {choice}: set in the engine's cache_ttl", previous)
    recent = list(gaps)[-RECENT_GAPS:]
    if not recent:
        return CachePlan("5m", "ttl 5m: no gap between turns seen yet", previous)
    costs = {ttl: _expected_cost(ttl, recent) for ttl in _LIFETIMES}
    ttl: CacheTtl = "1h" if costs["1h"] < costs["5m"] else "5m"
    median = statistics.median(recent)
    reason = f"ttl {ttl}: median gap {_duration(median)} over {len(recent)} turn(s)"
    return CachePlan(ttl, reason, previous)


def _expected_cost(ttl: CacheTtl, gaps: Sequence[float]) -> float:
    """The mean price of a turn's prefix, as a multiple of the input price."""
    lifetime, write = _LIFETIMES[ttl]
    return sum(_READ if gap <= lifetime else write for gap in gaps) / len(gaps)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
