"""Daemon load benchmark: a real daemon, real socket, echo engine.

Prints, measured side by side in one run:
- turns per second and p50/p99 per-turn latency at 1, 10 and 200 concurrent
  sessions (with the echo engine the latency is the daemon's own overhead:
  compile, trace fsync, transcript fsync, socket round trip);
- p50 latency late in one session of 2,000 turns against a fresh session's
  early turns, alternating (should be about equal: per-turn cost does not
  grow with the transcript, and the session rolls over at ``session_chars``);
- resident memory per warm session.

Usage: python bench/load.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import anyio
from _daemon import percentile, rss_kib, serve, write_org

from rosterd.client import RosterClient

CHANNELS = 200


async def session_turns(socket: Path, channel: str, turns: int, latencies: list[float]) -> None:
    async with await RosterClient.connect(socket) as client:
        opened = await client.call("session.open", {"worker": "ada", "channel": channel})
        for n in range(turns):
            start = time.perf_counter()
            await client.call("session.send", {"session": opened["session"], "text": f"turn {n}"})
            latencies.append(time.perf_counter() - start)


async def run(quick: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_org(root / "org", ("ada",), CHANNELS, identity_lines=200)
        socket = root / "rosterd.sock"
        async with serve(root / "org", root / "state", socket) as daemon:
            base_rss = rss_kib(daemon.pid)
            print(f"{'sessions':>8} {'turns':>6} {'turns/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
            used = 0
            for concurrency, turns in ((1, 20), (10, 10), (200, 3 if quick else 5)):
                latencies: list[float] = []
                start = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for n in range(concurrency):
                        channel = f"c{(used + n) % CHANNELS}"
                        tg.start_soon(session_turns, socket, channel, turns, latencies)
                wall = time.perf_counter() - start
                used += concurrency
                p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
                print(
                    f"{concurrency:>8} {len(latencies):>6} {len(latencies) / wall:>9.1f} "
                    f"{p50 * 1000:>8.2f} {p99 * 1000:>8.2f}"
                )
            async with await RosterClient.connect(socket) as client:
                status = await client.call("daemon.status")
            warm = status["sessions"]
            per_session = (rss_kib(daemon.pid) - base_rss) / max(warm, 1)
            print(f"resident memory: {per_session:.1f} KiB per warm session ({warm} warm)")

            # Long enough to reach the session_chars bound, so the late turns
            # include what a rollover leaves behind as well as a long transcript.
            # The late turns alternate with a fresh session's early ones, so
            # that machine noise (other processes) hits both alike.
            long_turns = 100 if quick else 2000
            window = 20 if quick else 100
            rollovers: list[int] = []
            async with await RosterClient.connect(socket) as client:

                async def turn(session: str, n: int) -> tuple[str, float]:
                    start = time.perf_counter()
                    sent = await client.call("session.send", {"session": session, "text": f"{n}"})
                    return sent["run"], time.perf_counter() - start

                async def open_session(channel: str) -> str:
                    params = {"worker": "ada", "channel": channel}
                    return str((await client.call("session.open", params))["session"])

                long = await open_session(f"c{CHANNELS - 1}")
                for n in range(long_turns - window):
                    run, _ = await turn(long, n)
                    if run != long:
                        long = run
                        rollovers.append(n + 1)
                fresh = await open_session(f"c{CHANNELS - 2}")
                for n in range(5):  # the first turn carries the channel history
                    await turn(fresh, n)
                late, early = [], []
                for n in range(window):
                    long, elapsed = await turn(long, long_turns - window + n)
                    late.append(elapsed)
                    early.append((await turn(fresh, n))[1])
            rolled = ", ".join(map(str, rollovers)) or "none"
            late_p50, early_p50 = statistics.median(late), statistics.median(early)
            print(
                f"one session, {long_turns} turns (rolled over at turn {rolled}): p50 of its "
                f"last {window} turns {late_p50 * 1000:.2f} ms, of a fresh session's turns "
                f"6-{5 + window} alternating with them {early_p50 * 1000:.2f} ms, "
                f"late/early ratio {late_p50 / early_p50:.2f} (aim: about 1)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer turns, for CI smoke runs")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    anyio.run(run, args.quick)


if __name__ == "__main__":
    main()
