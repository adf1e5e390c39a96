"""What a channel costs at three paces: the cache lifetime rosterd chooses
against fixed ones, billed as Anthropic bills.

One session of a real daemon (in this process, on a clock the benchmark
moves, so hours of channel time take seconds) talks to the provider
simulator, which keeps a cached prefix for the lifetime each request asks
for (five minutes, or an hour) and reports writes by lifetime. The same
conversation is replayed at each cadence with ``cache_ttl`` set to
``auto``, ``5m`` and ``1h``, and the billed cost of each (USD, at
claude-sonnet-4-5's prices: input 3, cached 0.3, 5-minute write 3.75,
1-hour write 6, output 15 per million tokens) is printed with its ratio to
``auto``:

- (a) bursts: gaps of 5-90 s;
- (b) human pace: gaps of 4-50 min;
- (c) a working day: bursts of eight turns separated by 1-3 h breaks.

Before the session starts, four posts in the channel at the same pace are
what a fresh session goes by (as it would in a channel people talk in).

Goals: ``auto`` at most 1.03x the cheapest fixed choice on every cadence,
and at most 0.35x fixed ``5m`` at human pace. The session is kept open
across the breaks (``session_idle_s`` of a day): the prefix is the same
either way, and a session that rolled over would only add its own writes.

Usage: python bench/cost.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from engines_org import anthropic_engine, paced_session

CHOICES = ("auto", "5m", "1h")


def bursts(rng: random.Random, turn: int) -> float:
    return rng.uniform(5, 90)


def human(rng: random.Random, turn: int) -> float:
    return rng.uniform(4 * 60, 50 * 60)


def working_day(rng: random.Random, turn: int) -> float:
    return rng.uniform(3600, 3 * 3600) if turn % 8 == 7 else rng.uniform(5, 90)


CADENCES: dict[str, Callable[[random.Random, int], float]] = {
    "(a) bursts": bursts,
    "(b) human pace": human,
    "(c) working day": working_day,
}


async def billed(root: Path, choice: str, posts: list[float], gaps: list[float]) -> float:
    """USD that one session of ``len(gaps)`` turns, *gaps* apart, is billed,
    in a channel where people posted *posts* apart until it started."""
    entries, _ = await paced_session(root, anthropic_engine(choice), gaps, posts)
    if any(entry.cost is None for entry in entries):
        raise RuntimeError("a call without a price")
    return sum(entry.cost.usd for entry in entries if entry.cost is not None)


async def run(turns: int) -> None:
    print(f"cost of one session of {turns} turns, Anthropic caching, ratios to auto:")
    print(f"{'cadence':>16} {'auto $':>9} {'5m $':>9} {'1h $':>9} {'5m/auto':>8} {'1h/auto':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, cadence in CADENCES.items():
            rng = random.Random(36)
            before = [cadence(rng, turn) for turn in range(4)]
            gaps = [cadence(rng, turn) for turn in range(turns)]
            cost = {}
            for choice in CHOICES:
                where = Path(tmp) / f"{name[1]}-{choice}"
                cost[choice] = await billed(where, choice, before, gaps)
            auto = cost["auto"]
            print(
                f"{name:>16} {auto:>9.4f} {cost['5m']:>9.4f} {cost['1h']:>9.4f} "
                f"{cost['5m'] / auto:>8.2f} {cost['1h'] / auto:>8.2f}"
            )
            cheapest = min(cost["5m"], cost["1h"])
            print(f"{'':>16} auto / cheapest fixed: {auto / cheapest:.2f} (aim: at most 1.03)")
            if name.startswith("(b)"):
                print(f"{'':>16} auto / fixed 5m: {auto / cost['5m']:.2f} (aim: at most 0.35)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer turns, for CI smoke runs")
    args = parser.parse_args()
    anyio.run(run, 16 if args.quick else 50)


if __name__ == "__main__":
    main()
