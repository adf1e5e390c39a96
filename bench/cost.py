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

from harness import ManualClock, daemon_in_process
from simulator import Simulator, write_org

CHOICES = ("auto", "5m", "1h")
PRICES = (
    '\n[prices."sim-1"]\ninput = 3\ncached_input = 0.3\ncache_write_5m = 3.75\n'
    "cache_write_1h = 6\noutput = 15\n"
)


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


async def billed(root: Path, choice: str, before: list[float], gaps: list[float]) -> float:
    """USD that one session of ``len(gaps)`` turns, *gaps* apart, is billed,
    in a channel where people posted *before* apart until it started."""
    clock = ManualClock()
    async with Simulator(ttl_s=300, clock=clock) as sim:
        engine = f'kind = "anthropic"\nmodel = "sim-1"\nbase_url = "{sim.anthropic_url}"\n'
        write_org(root / "org", workers=1, channels=1, engine=engine + f'cache_ttl = "{choice}"')
        with (root / "org" / "org.toml").open("a") as toml:
            toml.write(f"\n[daemon]\nsession_idle_s = 86400\n{PRICES}")
        async with (
            daemon_in_process(root / "org", root / "state", clock=clock) as daemon,
            await daemon.client() as client,
        ):
            # The channel's own pace is what a fresh session goes by.
            for post, gap in enumerate(before):
                await client.channel_post("c0", "alice", f"post {post}")
                clock.advance(gap)
            opened = await client.session_open("w0", "c0")
            for turn, gap in enumerate(gaps):
                await client.session_send(opened.session, f"turn {turn}: what changed since?")
                clock.advance(gap)
            shown = await client.runs_show(opened.session)
    costs = [e.cost for e in shown.transcript if e.role == "assistant"]
    if any(cost is None for cost in costs):
        raise RuntimeError("a call without a price")
    return sum(cost.usd for cost in costs if cost is not None)


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
