"""Provider faults: turns through a fault-injecting proxy, with a fallback engine.

Two daemons run side by side, their turns alternating, on the same org but
for one thing: the primary engine of one is reached through a proxy that
answers a seeded 30% of its requests with 429 or 529 (``retry-after`` as
given), the other's through a proxy that passes everything. Both fall back
to a second engine. Printed: turns, failed turns, faults injected, calls
the fallback answered, and the p50 and p99 turn latency of each daemon,
with the p99 added by the faults beside the largest ``retry-after``.

By default the provider simulator stands in for both engines. With
``--engine KIND --base-url URL`` the primary is that real server (a
llama.cpp ``llama-server``, say) behind the proxy, and the fallback the
same server reached directly.

Usage: python bench/faults.py [--quick] [--retry-after S]
       [--engine openai|anthropic --base-url URL [--model M]]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from urllib.parse import urlsplit

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _daemon import percentile, serve
from faultproxy import Fault, fault_proxy
from simulator import Simulator, write_org

from rosterd.client import RosterClient, RpcError

SESSIONS = 10
SHARE = 0.3


def org_toml(kind: str, model: str, primary: str, fallback_kind: str, fallback: str) -> str:
    """Worker w0 on ``primary`` (through a proxy), falling back to ``fallback``."""
    return (
        f'\n[engines.primary]\nkind = "{kind}"\nmodel = "{model}"\nbase_url = "{primary}"\n'
        'max_retries = 0\nmax_tokens = 64\nfallback = ["fallback"]\n'
        f'\n[engines.fallback]\nkind = "{fallback_kind}"\nmodel = "{model}"\n'
        f'base_url = "{fallback}"\nmax_tokens = 64\n'
        '\n[workers.w0.engine]\nuse = "primary"\n'
    )


async def drive(socket: Path, sessions: int, turns: int, latencies: list[float]) -> int:
    """*turns* turns over *sessions* sessions, one at a time; how many failed."""
    failed = 0
    async with await RosterClient.connect(socket) as client:
        opened = [await client.session_open("w0", f"c{n}") for n in range(sessions)]
        for turn in range(turns):
            session = opened[turn % sessions].session
            start = time.perf_counter()
            try:
                await client.session_send(session, f"turn {turn}: how is it going?")
            except RpcError:
                failed += 1
            latencies.append(time.perf_counter() - start)
    return failed


async def run(args: argparse.Namespace) -> None:
    turns = 60 if args.quick else 200
    rng = random.Random(29)
    plan: dict[int, Fault] = {
        n: rng.choice(("429", "529")) for n in range(turns * 4) if rng.random() < SHARE
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with AsyncExitStack() as stack:
            if args.base_url is None:
                primary = await stack.enter_async_context(Simulator())
                local = await stack.enter_async_context(Simulator())
                kind, model, upstream = "anthropic", "sim-1", ("127.0.0.1", primary.port)
                fallback_kind, fallback_url = "openai", local.openai_url
            else:
                parts = urlsplit(args.base_url)
                kind, model = args.engine, args.model
                upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
                fallback_kind, fallback_url = args.engine, args.base_url
            faulty = await stack.enter_async_context(
                fault_proxy(upstream, plan.get, retry_after=args.retry_after)
            )
            clean = await stack.enter_async_context(fault_proxy(upstream, lambda n: None))
            sockets = {}
            for name, proxy in (("faults", faulty), ("clean", clean)):
                write_org(root / name, workers=1, channels=SESSIONS, identity_chars=2000)
                path = (args.base_url and urlsplit(args.base_url).path) or ""
                toml = org_toml(kind, model, proxy.url + path, fallback_kind, fallback_url)
                with (root / name / "org.toml").open("a") as file:
                    file.write(toml)
                socket = root / f"{name}.sock"
                await stack.enter_async_context(serve(root / name, root / f"{name}-state", socket))
                sockets[name] = socket
            latencies: dict[str, list[float]] = {"faults": [], "clean": []}
            failed = {"faults": 0, "clean": 0}
            # Alternate in rounds of a few turns, so noise hits both alike.
            rounds = 10
            for _ in range(rounds):
                for name in ("faults", "clean"):
                    failed[name] += await drive(
                        sockets[name], SESSIONS, turns // rounds, latencies[name]
                    )
    injected = sum(1 for fault in faulty.faults if fault is not None)
    print(
        f"provider faults: {turns} turns per daemon over {SESSIONS} sessions, {SHARE:.0%} "
        f"of the primary's calls refused with 429/529 (retry-after {args.retry_after:g}s)"
    )
    print(f"{'daemon':>8} {'turns':>6} {'failed':>7} {'faults':>7} {'p50 ms':>8} {'p99 ms':>8}")
    for name, proxy in (("faults", faulty), ("clean", clean)):
        done = latencies[name]
        faults = sum(1 for fault in proxy.faults if fault is not None)
        print(
            f"{name:>8} {len(done):>6} {failed[name]:>7} {faults:>7} "
            f"{percentile(done, 0.5) * 1000:>8.1f} {percentile(done, 0.99) * 1000:>8.1f}"
        )
    added = percentile(latencies["faults"], 0.99) - percentile(latencies["clean"], 0.99)
    print(f"faults injected: {injected}; failed turns: {failed['faults']}")
    print(
        f"p99 added by the faults: {added:.3f} s "
        f"(aim: at most the largest retry-after + 1 s = {args.retry_after + 1:g} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer turns, for CI smoke runs")
    parser.add_argument(
        "--retry-after", type=float, default=1.0, help="the retry-after of injected faults"
    )
    parser.add_argument("--engine", choices=["openai", "anthropic"], help="a real server's API")
    parser.add_argument("--base-url", help="the real server: with /v1 for openai")
    parser.add_argument("--model", default="default", help="model name to ask the real server")
    args = parser.parse_args()
    if (args.engine is None) != (args.base_url is None):
        parser.error("--engine and --base-url go together")
    anyio.run(run, args)


if __name__ == "__main__":
    main()
