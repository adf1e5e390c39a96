"""What a channel costs at three paces: the cache choice rosterd makes
against fixed ones, billed as each provider bills.

One session of a real daemon (in this process, on a clock the benchmark
moves, so hours of channel time take seconds) talks to the provider
simulator, which keeps each cached prefix exactly as long as the provider
would and bills writes and reads at the provider's rates:

- Anthropic (claude-sonnet-4-5's prices): ``cache_ttl`` ``auto``, ``5m``,
  ``1h``; a 5-minute write costs 1.25x input, an hour's 2x, a read 0.1x.
- OpenAI on the explicit contract (a gpt-5.6 model, gpt-5's prices):
  ``prompt_cache`` ``auto``, ``implicit``, ``explicit``; writes live 30
  minutes and cost 1.25x input, reads 0.1x.
- OpenAI before it (a gpt-5.1 model): ``auto`` (24-hour retention) and
  ``implicit`` (in memory, five minutes); writes are free, reads 0.1x.

The same conversation is replayed at each cadence, 50 turns:

- (a) bursts: gaps of 5-90 s;
- (b) human pace: gaps of 4-50 min;
- (c) a working day: bursts of eight turns separated by 1-3 h breaks.

Before the session starts, four posts in the channel at the same pace are
what a fresh session goes by (as it would in a channel people talk in).
Each fixed choice's cost is printed as a ratio to ``auto``, and so are the
two naive strategies: the provider's default (Anthropic 5m, OpenAI
implicit: already a fixed column) and no cache at all (every token at the
input price; the same calls' usage billed without reads or writes).

Goals: ``auto`` at most 1.03x the cheapest fixed choice on every provider
and cadence, and on Anthropic at most 0.35x fixed ``5m`` at human pace. The
session is kept open across the breaks (``session_idle_s`` of a day): the
prefix is the same either way, and a session that rolled over would only
add its own writes.

Usage: python bench/cost.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from engines_org import anthropic_engine, openai_engine, paced_session

from rosterd.pricing import bill
from rosterd.protocol import Usage

PROVIDERS: dict[str, tuple[Callable[[str], str], tuple[str, ...]]] = {
    "anthropic": (anthropic_engine, ("auto", "5m", "1h")),
    "openai gpt-5.6": (openai_engine, ("auto", "implicit", "explicit")),
    "openai gpt-5.1": (lambda choice: openai_engine(choice, "gpt-5.1-sim"), ("auto", "implicit")),
}


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


class Bill(NamedTuple):
    usd: float
    # The same calls with no cache: every input token at the input price.
    uncached_usd: float


async def billed(root: Path, engine: str, posts: list[float], gaps: list[float]) -> Bill:
    """What one session of ``len(gaps)`` turns, *gaps* apart, is billed, in a
    channel where people posted *posts* apart until it started."""
    entries, _ = await paced_session(root, engine, gaps, posts)
    usd = uncached = 0.0
    for entry in entries:
        if entry.cost is None or entry.usage is None:
            raise RuntimeError("a call without a price or usage")
        usd += entry.cost.usd
        plain = Usage(
            input_tokens=entry.usage.input_tokens, output_tokens=entry.usage.output_tokens
        )
        uncached += bill(plain, entry.cost.price, "none").usd
    return Bill(usd, uncached)


async def run(turns: int) -> None:
    print(f"cost of one session of {turns} turns, USD for auto, other choices as ratios to auto:")
    five = float("nan")
    with tempfile.TemporaryDirectory() as tmp:
        for provider, (engine, choices) in PROVIDERS.items():
            fixed = choices[1:]
            print(f"\n{provider}")
            print(f"{'cadence':>16} {'auto $':>9} " + " ".join(f"{c:>9}" for c in fixed), end="")
            print(f" {'no cache':>9} {'auto/cheapest':>14}")
            for name, cadence in CADENCES.items():
                rng = random.Random(36)
                before = [cadence(rng, turn) for turn in range(4)]
                gaps = [cadence(rng, turn) for turn in range(turns)]
                cost: dict[str, Bill] = {}
                for choice in choices:
                    where = Path(tmp) / f"{provider}-{name[1]}-{choice}".replace(" ", "_")
                    cost[choice] = await billed(where, engine(choice), before, gaps)
                auto = cost["auto"].usd
                cheapest = min(cost[c].usd for c in fixed)
                ratios = " ".join(f"{cost[c].usd / auto:>9.2f}" for c in fixed)
                print(
                    f"{name:>16} {auto:>9.4f} {ratios} {cost['auto'].uncached_usd / auto:>9.2f} "
                    f"{auto / cheapest:>14.2f}"
                )
                if provider == "anthropic" and name.startswith("(b)"):
                    five = auto / cost["5m"].usd
            print(f"{'':>16} aim: auto/cheapest at most 1.03 on every cadence")
            if provider == "anthropic":
                print(f"{'':>16} at human pace, auto / fixed 5m: {five:.2f} (aim: at most 0.35)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer turns, for CI smoke runs")
    args = parser.parse_args()
    anyio.run(run, 16 if args.quick else 50)


if __name__ == "__main__":
    main()
