"""How much of the input is served from the provider's prompt cache, and what
the input is billed.

Runs 3 workers x 4 channels x 30 turns through a real daemon over its
socket (``roster serve``), the provider simulator served over HTTP behind
the real engines, in Anthropic and OpenAI mode. Between turns memory notes
are added, gates filed and resolved two turns later, every tenth turn a
task runs, and halfway one worker's identity is edited and its sessions
reopened. Strategies:

- rosterd: what the daemon sent;
- naive (a): the same conversation replayed with the system prompt rebuilt
  every turn with the memory and the current time in it;
- naive (b): the daemon's requests replayed with the run id in the system
  prompt;
- message-only: the same workload through a daemon given no memory and no
  gates, the floor for what carrying them costs;
- bound: 1 - fresh / all input tokens of the daemon's turns, where a token
  is fresh when no earlier request (of any session or task) had the same
  prefix up to it: what a perfect token-granular cache would serve.

The share is cache-read tokens over all input tokens, as the simulator
reports them through the engines' usage. The billed input cost weighs those
tokens the way each provider bills them: Anthropic uncached 1.0, cache write
1.25, cache read 0.1; OpenAI uncached 1.0, cached 0.5 (in uncached-token
equivalents). ``--quick`` runs a small version.

With ``--engine openai|anthropic --base-url URL`` it measures a real server
instead (see ``_real.py``); the table it prints follows the simulator's,
with the simulator standing in for the server.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _daemon import serve
from _real import add_real_arguments, measure, run_real, table
from _replay import NAIVE, replay
from _workload import Recording, Shape, run_workload
from simulator import CHARS_PER_TOKEN, Simulator, filler, prompt_bytes, write_org

from rosterd.engines import open_engine
from rosterd.org import EngineConfig, EngineKind
from rosterd.protocol import Usage

STRATEGIES = ("rosterd", "naive_a", "naive_b", "message_only")
# What carries memory and briefing, so what rosterd's cost is compared with.
CARRIERS = ("rosterd", "naive_a", "naive_b")
MODEL = "sim-model"


def _reply(number: int, prompt_chars: int) -> str:
    return filler(f"reply {number}", 300 + (number * 37) % 400).strip()


def _base_url(kind: EngineKind, sim: Simulator) -> str:
    return sim.openai_url if kind == "openai" else sim.anthropic_url


def _engine_toml(kind: EngineKind, base_url: str) -> str:
    return f'kind = "{kind}"\nmodel = "{MODEL}"\nbase_url = "{base_url}"\nmax_retries = 0'


async def _through_daemon(
    root: Path, kind: EngineKind, shape: Shape, carry: bool
) -> tuple[Recording, list[bytes]]:
    """The workload through a daemon whose engine talks to a fresh simulator."""
    async with Simulator(reply=_reply) as sim:
        org = root / "org"
        write_org(
            org,
            workers=shape.workers,
            channels=shape.channels,
            engine=_engine_toml(kind, _base_url(kind, sim)),
        )
        socket = root / "rosterd.sock"
        async with serve(org, root / "state", socket):
            recording = await run_workload(
                socket, org, shape, carry=carry, counter=lambda: len(sim.requests)
            )
        return recording, [prompt_bytes(r) for r in sim.requests]


async def _replayed(
    kind: EngineKind, strategy: str, recording: Recording, org: Path
) -> list[Usage]:
    async with Simulator(reply=_reply) as sim:
        config = EngineConfig(kind=kind, model=MODEL, base_url=_base_url(kind, sim), max_retries=0)
        engine = open_engine(config, {})
        try:
            replayed = await replay(strategy, recording, org, engine)
        finally:
            await engine.aclose()
    assert replayed.failed == 0, f"{strategy}: {replayed.failed} turns failed"
    return _measured(replayed.usages)


def _measured(usages: list[Usage | None]) -> list[Usage]:
    assert all(u is not None for u in usages), "the simulator always reports usage"
    return [u for u in usages if u is not None]


def _turn_usages(recording: Recording) -> list[Usage]:
    failed = sum(t.failed for t in recording.turns)
    assert not failed, f"{failed} turns failed against the simulator"
    return _measured([t.usage for t in recording.turns])


async def _real_mode_on_simulator(kind: EngineKind) -> str:
    """What ``--engine KIND --base-url URL`` prints, with the simulator as the server."""
    async with Simulator(reply=_reply) as sim:
        config = EngineConfig(kind=kind, model=MODEL, base_url=_base_url(kind, sim))
        return table(config, await measure(config))


def read_share(usages: list[Usage]) -> float:
    total = sum(u.input_tokens for u in usages)
    return sum(u.cached_input_tokens for u in usages) / total if total else 0.0


def billed(kind: EngineKind, usages: list[Usage]) -> float:
    """Input cost in uncached-token equivalents, by the provider's weights."""
    cost = 0.0
    for u in usages:
        fresh = u.input_tokens - u.cached_input_tokens - u.cache_write_tokens
        if kind == "anthropic":
            cost += fresh + 1.25 * u.cache_write_tokens + 0.1 * u.cached_input_tokens
        else:
            cost += fresh + u.cache_write_tokens + 0.5 * u.cached_input_tokens
    return cost


def bound(prompts: list[bytes], counted: list[int]) -> float:
    """1 - fresh / all over the *counted* prompts: a token is fresh unless an
    earlier prompt (counted or not) shares its prefix."""
    fresh = 0
    total = 0
    for i in counted:
        prompt = prompts[i]
        tokens = len(prompt) // CHARS_PER_TOKEN
        shared = max((_common_prefix(prompt, earlier) for earlier in prompts[:i]), default=0)
        total += tokens
        fresh += tokens - shared // CHARS_PER_TOKEN
    return 1 - fresh / total if total else 0.0


def _common_prefix(a: bytes, b: bytes, step: int = 4096) -> int:
    short, long = sorted((a, b), key=len)
    if long.startswith(short):
        return len(short)
    n = len(short)
    lo = 0
    while lo + step <= n and a[lo : lo + step] == b[lo : lo + step]:
        lo += step
    hi = min(lo + step, n)
    # a[:lo] matches and a[:hi] does not: bisect the block between them.
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


async def bench(shape: Shape, kinds: list[EngineKind]) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            root = Path(tmp) / kind
            recording, prompts = await _through_daemon(root / "rosterd", kind, shape, True)
            floor, _ = await _through_daemon(root / "message_only", kind, shape, False)
            usages = {
                "rosterd": _turn_usages(recording),
                "message_only": _turn_usages(floor),
            }
            for strategy in NAIVE:
                org = root / "rosterd" / "org"
                usages[strategy] = await _replayed(kind, strategy, recording, org)
            row: dict[str, float] = {}
            for strategy in STRATEGIES:
                row[strategy] = read_share(usages[strategy])
                row[f"cost_{strategy}"] = billed(kind, usages[strategy])
            counted = [t.before for t in recording.turns if t.before is not None]
            row["bound"] = bound(prompts, counted)
            row["requests"] = len(usages["rosterd"])
            row["input_tokens"] = sum(u.input_tokens for u in usages["rosterd"])
            results[kind] = row
    return results


def _table(shape: Shape, results: dict[str, dict[str, float]]) -> str:
    lines = [
        f"cache reads / input tokens, {shape.workers} workers x {shape.channels} channels "
        f"x {shape.turns} turns through the daemon",
        f"{'provider':<10} {'rosterd':>8} {'naive(a)':>9} {'naive(b)':>9} {'bound':>7} "
        f"{'gap':>6} {'input tokens':>13}",
    ]
    for kind, row in results.items():
        gap = row["bound"] - row["rosterd"]
        lines.append(
            f"{kind:<10} {row['rosterd']:>8.2%} {row['naive_a']:>9.2%} {row['naive_b']:>9.2%} "
            f"{row['bound']:>7.2%} {gap:>6.2%} {int(row['input_tokens']):>13,}"
        )
    lines += [
        "",
        "billed input cost (uncached-token equivalents; anthropic: uncached 1.0, cache write "
        "1.25, cache read 0.1; openai: uncached 1.0, cached 0.5)",
        f"{'provider':<10} {'rosterd':>10} {'naive(a)':>10} {'naive(b)':>10} "
        f"{'message-only':>13} {'rosterd/message-only':>21}",
    ]
    for kind, row in results.items():
        lines.append(
            f"{kind:<10} {row['cost_rosterd']:>10,.0f} {row['cost_naive_a']:>10,.0f} "
            f"{row['cost_naive_b']:>10,.0f} {row['cost_message_only']:>13,.0f} "
            f"{overhead(row) + 1:>21.3f}"
        )
    return "\n".join(lines)


def overhead(row: dict[str, float]) -> float:
    """How much more rosterd's input costs than sending no memory or briefing."""
    return row["cost_rosterd"] / row["cost_message_only"] - 1


def _cost_failures(results: dict[str, dict[str, float]], max_overhead: float) -> list[str]:
    failures = []
    for kind, row in results.items():
        cheapest = min(CARRIERS, key=lambda s: row[f"cost_{s}"])
        if cheapest != "rosterd":
            failures.append(f"{kind}: {cheapest} costs less than rosterd")
        if overhead(row) > max_overhead:
            failures.append(
                f"{kind}: rosterd costs {overhead(row):.1%} more than message-only "
                f"> {max_overhead:.1%}"
            )
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2 workers x 2 channels x 8 turns")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--provider", choices=["anthropic", "openai"], action="append")
    parser.add_argument(
        "--max-gap", type=float, default=None, help="exit 1 if rosterd trails the bound by more"
    )
    parser.add_argument(
        "--max-overhead",
        type=float,
        default=None,
        help="exit 1 unless rosterd's billed input is the lowest of the strategies carrying "
        "memory and briefing and within this fraction of message-only",
    )
    add_real_arguments(parser)
    args = parser.parse_args(argv)
    if args.engine is not None or args.base_url is not None:
        return run_real(parser, args)
    shape = Shape(2, 2, 8) if args.quick else Shape(3, 4, 30)
    kinds: list[EngineKind] = args.provider or ["anthropic", "openai"]
    results = anyio.run(bench, shape, kinds)
    if args.json:
        print(json.dumps({"shape": shape.__dict__, "results": results}, sort_keys=True))
    else:
        print(_table(shape, results))
        for kind in kinds:
            print()
            print(anyio.run(_real_mode_on_simulator, kind))
    if args.max_gap is not None:
        worst = max(row["bound"] - row["rosterd"] for row in results.values())
        if worst > args.max_gap:
            print(f"rosterd trails the bound by {worst:.2%} > {args.max_gap:.2%}", file=sys.stderr)
            return 1
    if args.max_overhead is not None:
        failures = _cost_failures(results, args.max_overhead)
        for failure in failures:
            print(failure, file=sys.stderr)
        if failures:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
