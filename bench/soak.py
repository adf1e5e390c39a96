"""Soak benchmark: minutes of paced mixed traffic against a real daemon.

Eight clients share a bounded request budget at a fixed total rate: session
turns (each client closes its session every 50 turns and opens a fresh one,
as real chats end), memory notes, gates filed and resolved, queued tasks and
reads. The engine is the offline echo engine, so per-request latency is the
daemon's own overhead (compile, fsyncs, socket round trip).

Prints throughput, p50/p99 overhead, and the daemon's open file descriptors
(/proc/<pid>/fd) and resident memory at start and end, with the growth.

Usage: python bench/soak.py [--minutes 10] [--quick] [--rate 40] [--max-requests N] [--steady]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from _daemon import open_fds, percentile, rss_kib, serve, write_org

from rosterd.client import RosterClient, RpcError

CLIENTS = 8
TURNS_PER_SESSION = 50
OPS = ["turn", "memory", "gate", "resolve", "task", "read"]
WEIGHTS = [50, 12, 10, 6, 10, 12]
# Turns and reads only: stored state stays bounded (transcripts are on disk,
# channel tails are capped), so RSS growth here would be a leak.
STEADY_WEIGHTS = [80, 0, 0, 0, 0, 20]


class _BudgetSpent(Exception):
    """The request budget is used up: the client stops."""


class Soak:
    """The shared budget, pacing and measurements of one run."""

    def __init__(
        self, socket: Path, seconds: float, rate: float, max_requests: int, weights: list[int]
    ) -> None:
        self.socket = socket
        self.weights = weights
        self.seconds = seconds
        self.interval = CLIENTS / rate  # per client
        self.max_requests = max_requests
        self.sent = 0
        self.latency: dict[str, list[float]] = {}
        self.errors: Counter[str] = Counter()

    async def call(self, client: RosterClient, method: str, params: dict[str, Any]) -> Any:
        if self.sent >= self.max_requests:
            raise _BudgetSpent
        self.sent += 1
        start = time.perf_counter()
        try:
            return await client.call(method, params)
        except RpcError as exc:
            self.errors[f"{method}: {exc.code}"] += 1
            return None
        finally:
            self.latency.setdefault(method, []).append(time.perf_counter() - start)

    async def client(self, k: int, deadline: float) -> None:
        with contextlib.suppress(_BudgetSpent):
            await self._client(k, deadline)

    async def _client(self, k: int, deadline: float) -> None:
        rng = random.Random(k)
        worker = ("ada", "grace")[k % 2]
        channel = f"c{k}"
        gates: list[str] = []
        tasks: list[str] = []
        async with await RosterClient.connect(self.socket) as client:
            session, turns = None, 0
            next_at = time.monotonic() + k * self.interval / CLIENTS  # staggered, not bursts
            while time.monotonic() < deadline and self.sent < self.max_requests:
                next_at += self.interval
                await anyio.sleep(max(0.0, next_at - time.monotonic()))
                match rng.choices(OPS, self.weights)[0]:
                    case "turn":
                        if session is None or turns >= TURNS_PER_SESSION:
                            if session is not None:
                                await self.call(client, "session.close", {"session": session})
                            opened = await self.call(
                                client, "session.open", {"worker": worker, "channel": channel}
                            )
                            session, turns = opened["session"], 0
                        turns += 1
                        await self.call(
                            client, "session.send", {"session": session, "text": f"turn {turns}"}
                        )
                    case "memory":
                        note = {"worker": worker, "text": f"note {self.sent}", "channel": channel}
                        await self.call(client, "memory.add", note)
                    case "gate":
                        summary = {
                            "worker": worker,
                            "summary": f"q {self.sent}",
                            "channel": channel,
                        }
                        gate = await self.call(client, "gate.file", summary)
                        gates.append(gate["id"])
                    case "resolve" if gates:
                        await self.call(
                            client, "gate.resolve", {"gate": gates.pop(), "outcome": "ok"}
                        )
                    case "task":
                        task = {"worker": worker, "channel": channel, "text": f"task {self.sent}"}
                        tasks.append((await self.call(client, "task.submit", task))["id"])
                    case _:
                        if tasks:
                            await self.call(client, "task.get", {"task": rng.choice(tasks)})
                        await self.call(client, "daemon.status", {})


async def warm_up(socket: Path) -> None:
    """Touch every kind of state once, so lazily opened files count at the start."""
    async with await RosterClient.connect(socket) as client:
        for worker in ("ada", "grace"):
            await client.call("memory.add", {"worker": worker, "text": "warm-up"})
            gate = await client.call("gate.file", {"worker": worker, "summary": "warm-up"})
            await client.call("gate.resolve", {"gate": gate["id"], "outcome": "ok"})
        for n in range(CLIENTS):
            worker = ("ada", "grace")[n % 2]
            opened = await client.call("session.open", {"worker": worker, "channel": f"c{n}"})
            await client.call("session.send", {"session": opened["session"], "text": "warm-up"})
            await client.call("task.submit", {"worker": worker, "channel": f"c{n}", "text": "w"})
        await client.call("runs.list")


async def run(seconds: float, rate: float, max_requests: int, steady: bool) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_org(root / "org", ("ada", "grace"), CLIENTS)
        socket = root / "rosterd.sock"
        async with serve(root / "org", root / "state", socket) as daemon:
            await warm_up(socket)
            fds_start, rss_start = open_fds(daemon.pid), rss_kib(daemon.pid)
            soak = Soak(socket, seconds, rate, max_requests, STEADY_WEIGHTS if steady else WEIGHTS)
            mix = "steady mix (turns and reads)" if steady else "mixed traffic"
            print(
                f"soak: {seconds:.0f} s, {CLIENTS} clients, {mix}, at most {max_requests} "
                f"requests at {rate:g}/s, echo engine"
            )
            start = time.monotonic()
            rss_mid = 0

            async def sample_halfway() -> None:
                nonlocal rss_mid
                await anyio.sleep(seconds / 2)
                rss_mid = rss_kib(daemon.pid)

            async with anyio.create_task_group() as tg:
                tg.start_soon(sample_halfway)
                for k in range(CLIENTS):
                    tg.start_soon(soak.client, k, start + seconds)
            wall = time.monotonic() - start
            # Let queued tasks finish, so their run files are closed before the count.
            await anyio.sleep(1.0)
            fds_end, rss_end = open_fds(daemon.pid), rss_kib(daemon.pid)
        code = daemon.returncode
    every = [s for values in soak.latency.values() for s in values]
    turns = soak.latency.get("session.send", [0.0])
    errors = sum(soak.errors.values())
    print(f"requests: {len(every)} in {wall:.1f} s, {len(every) / wall:.1f}/s, errors {errors}")
    print(
        f"overhead ms: p50 {percentile(every, 0.5) * 1000:.2f} "
        f"p99 {percentile(every, 0.99) * 1000:.2f}; "
        f"session.send p50 {percentile(turns, 0.5) * 1000:.2f} "
        f"p99 {percentile(turns, 0.99) * 1000:.2f}"
    )
    for method, values in sorted(soak.latency.items()):
        p50, p99 = percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000
        print(f"  {method:<14} {len(values):>7} calls  p50 {p50:7.2f}  p99 {p99:7.2f} ms")
    print(f"fds: start {fds_start} end {fds_end} growth {fds_end - fds_start}")
    growth = rss_end - rss_start
    print(
        f"rss KiB: start {rss_start} end {rss_end} growth {growth} "
        f"({100 * growth / rss_start:.1f}%); second half {rss_end - rss_mid:+d}"
    )
    for what, count in sorted(soak.errors.items()):
        print(f"error: {what} x{count}")
    print(f"daemon exit code: {code}")
    return 0 if errors == 0 and code == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=10.0, help="duration (default 10)")
    parser.add_argument("--quick", action="store_true", help="10 seconds, for tests")
    parser.add_argument("--rate", type=float, default=40.0, help="requests per second, all clients")
    parser.add_argument("--max-requests", type=int, help="request budget (default: rate x time)")
    parser.add_argument(
        "--steady", action="store_true", help="turns and reads only: stored state stays bounded"
    )
    args = parser.parse_args(argv)
    seconds = 10.0 if args.quick else args.minutes * 60
    budget = args.max_requests or int(args.rate * seconds)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return anyio.run(run, seconds, args.rate, budget, args.steady)


if __name__ == "__main__":
    sys.exit(main())
