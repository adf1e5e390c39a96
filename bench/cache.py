"""How much of the input is served from the provider's prompt cache, and what
the input is billed.

Runs 3 workers x 4 channels x 30 turns (memory and gates arrive between
turns, gates are resolved two turns after filing) through the provider
simulator, in Anthropic and OpenAI mode, for:

- rosterd: the system part compiled once per session, each turn's fresh input
  compiled alone (memory and gates the session already sent left out), the
  transcript append-only;
- naive (a): the system prompt rebuilt every turn with the memory and the
  current time in it;
- naive (b): rosterd's prompts, but with the run id in the system prompt;
- message-only: rosterd's prompts without any memory or briefing, the floor
  for what carrying them costs;
- bound: 1 - fresh / all input tokens, where a token is fresh when no earlier
  request (of any session) had the same prefix up to it: what a perfect
  token-granular cache would serve for rosterd's requests.

The share is cache-read tokens over all input tokens, as the simulator
reports them through the engines' usage. The billed input cost weighs those
tokens the way each provider bills them: Anthropic uncached 1.0, cache write
1.25, cache read 0.1; OpenAI uncached 1.0, cached 0.5 (in uncached-token
equivalents). ``--quick`` runs a small version.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from simulator import CHARS_PER_TOKEN, Simulator, filler, prompt_bytes, write_org

from rosterd.compiler import (
    Boundary,
    BoundaryName,
    ChannelMessage,
    Gate,
    MemoryItem,
    RunMeta,
    SystemPrompt,
    TurnInput,
    compile_system,
    compile_turn,
    iso_time,
)
from rosterd.engines import (
    AnthropicEngine,
    ChatMessage,
    Engine,
    EngineRequest,
    OpenAIEngine,
    Usage,
)
from rosterd.org import EngineConfig, EngineKind, Org, Surface
from rosterd.sessions import ShownLedger

START = 1_700_000_000.0
STRATEGIES = ("rosterd", "naive_a", "naive_b", "message_only")
# What carries memory and briefing, so what rosterd's cost is compared with.
CARRIERS = ("rosterd", "naive_a", "naive_b")


@dataclass
class Shape:
    workers: int
    channels: int
    turns: int


@dataclass
class World:
    """Memory and gates as they stand before a turn; the same for every strategy."""

    memory: dict[str, list[MemoryItem]]
    gates: list[Gate]
    resolved: list[Gate]

    def advance(self, turn: int, workers: list[str], channels: list[str]) -> None:
        for w, worker in enumerate(workers):
            if turn % 3 == 0:
                channel = channels[(turn // 3 + w) % len(channels)] if turn % 2 else None
                item = MemoryItem(
                    id=f"m-{worker}-{turn}",
                    text=filler(f"memory {worker} {turn}", 180).strip(),
                    created_at=START + turn,
                    channel=channel,
                )
                self.memory[worker].append(item)
            if turn % 5 == 1:
                self.gates.append(
                    Gate(
                        id=f"g-{worker}-{turn}",
                        worker=worker,
                        summary=f"approve step {turn} of the rollout for {worker}",
                        filed_at=START + turn,
                        channel=channels[turn % len(channels)],
                    )
                )
        # A gate is resolved two turns after it was filed; the next turn's
        # briefing shows the outcome, as a session's does.
        due = START + turn - 2
        self.resolved = [
            msgspec.structs.replace(g, outcome="approved") for g in self.gates if g.filed_at <= due
        ]
        self.gates = [g for g in self.gates if g.filed_at > due]


class Session:
    """One (worker, channel) chat, rendering its prompts by one strategy."""

    def __init__(self, org: Org, strategy: str, worker: str, channel: str, run: str) -> None:
        self.strategy = strategy
        self.run = run
        self.scope = org.scope(Surface.SESSION, worker, channel)
        self.system = compile_system(org, self.scope, RunMeta(run=run, turn=0, now=START))
        if strategy == "naive_b":
            self.system = _prefixed(self.system, f"Run id: {run}\n")
        self.messages: list[ChatMessage] = []
        self.shown = ShownLedger()

    def request(self, turn: int, text: str, world: World, history: bool) -> EngineRequest:
        now = START + 60 * turn
        worker = self.scope.worker
        channel_history = _history(self.scope.channel or "") if history else None
        carries = self.strategy != "message_only"
        fresh = TurnInput(
            text=text,
            sender="alice",
            memory=tuple(world.memory[worker]) if carries else (),
            gates=(*world.resolved, *world.gates) if carries else (),
            history=channel_history,
            shown=self.shown.items(),
        )
        if self.strategy == "naive_a":
            self.messages.append(ChatMessage(role="user", content=f"alice: {text}"))
            system = _rebuilt(self.system, world.memory[worker], now)
            return EngineRequest(system=system, messages=tuple(self.messages))
        compiled = compile_turn(self.system, fresh, RunMeta(run=self.run, turn=turn, now=now))
        self.shown.note(turn, compiled.input_text)
        self.messages.append(ChatMessage(role="user", content=compiled.input_text))
        return EngineRequest(system=self.system, messages=tuple(self.messages))


def _with_boundaries(system: SystemPrompt, text: str, offsets: list[int]) -> SystemPrompt:
    names: tuple[BoundaryName, ...] = ("connections", "purpose", "system")
    marks = tuple(
        Boundary(
            name=name, offset=offset, sha256=hashlib.sha256(text[:offset].encode()).hexdigest()
        )
        for name, offset in zip(names, offsets, strict=True)
    )
    return msgspec.structs.replace(system, text=text, boundaries=marks)


def _prefixed(system: SystemPrompt, prefix: str) -> SystemPrompt:
    offsets = [b.offset + len(prefix) for b in system.boundaries]
    return _with_boundaries(system, prefix + system.text, offsets)


def _rebuilt(system: SystemPrompt, memory: list[MemoryItem], now: float) -> SystemPrompt:
    # A typical hand-rolled prompt: who you are, then "now" and what you remember.
    identity = system.blocks[0].content
    notes = "".join(f"- {item.text}\n" for item in memory)
    volatile = f"Current time: {iso_time(now)}\nMemory:\n{notes}"
    text = identity + volatile + system.text[len(identity) :]
    return _with_boundaries(system, text, [len(text)] * 3)


def _history(channel: str) -> tuple[ChannelMessage, ...]:
    return tuple(
        ChannelMessage(seq=i, sender="bob", text=f"earlier note {i} in {channel}", at=START - i)
        for i in range(5)
    )


def _reply(number: int, prompt_chars: int) -> str:
    return filler(f"reply {number}", 300 + (number * 37) % 400).strip()


def _engine(kind: EngineKind, sim: Simulator) -> Engine:
    base = sim.openai_url if kind == "openai" else sim.anthropic_url
    config = EngineConfig(kind=kind, model="sim-model", base_url=base, max_retries=0)
    if kind == "openai":
        return OpenAIEngine(config, api_key=None)
    return AnthropicEngine(config, api_key=None)


async def _ignore(piece: str) -> None:
    pass


async def run_strategy(
    kind: EngineKind, strategy: str, org: Org, shape: Shape
) -> tuple[list[Usage], list[bytes]]:
    workers = sorted(org.workers)[: shape.workers]
    channels = sorted(org.channels)[: shape.channels]
    world = World(memory={w: [] for w in workers}, gates=[], resolved=[])
    sessions = [
        Session(org, strategy, w, c, run=f"r-{w}-{c}-{strategy}") for w in workers for c in channels
    ]
    usages: list[Usage] = []
    async with Simulator(reply=_reply) as sim:
        engine = _engine(kind, sim)
        try:
            for turn in range(1, shape.turns + 1):
                world.advance(turn, workers, channels)
                for session in sessions:
                    text = f"turn {turn}: what is next for {session.scope.channel}?"
                    request = session.request(turn, text, world, history=turn == 1)
                    reply = await engine.complete(request, _ignore)
                    session.messages.append(ChatMessage(role="assistant", content=reply.text))
                    assert reply.usage is not None, "the simulator always reports usage"
                    usages.append(reply.usage)
        finally:
            await engine.aclose()
        prompts = [prompt_bytes(r) for r in sim.requests]
    return usages, prompts


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


def bound(prompts: list[bytes]) -> float:
    """1 - fresh / all: a token is fresh unless an earlier prompt shares its prefix."""
    fresh = 0
    total = 0
    for i, prompt in enumerate(prompts):
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
        org = write_org(Path(tmp), workers=shape.workers, channels=shape.channels)
        for kind in kinds:
            row: dict[str, float] = {}
            for strategy in STRATEGIES:
                usages, prompts = await run_strategy(kind, strategy, org, shape)
                row[strategy] = read_share(usages)
                row[f"cost_{strategy}"] = billed(kind, usages)
                if strategy == "rosterd":
                    row["bound"] = bound(prompts)
                    row["requests"] = len(usages)
                    row["input_tokens"] = sum(u.input_tokens for u in usages)
            results[kind] = row
    return results


def _table(shape: Shape, results: dict[str, dict[str, float]]) -> str:
    lines = [
        f"cache reads / input tokens, {shape.workers} workers x {shape.channels} channels "
        f"x {shape.turns} turns",
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
    args = parser.parse_args(argv)
    shape = Shape(2, 2, 8) if args.quick else Shape(3, 4, 30)
    kinds: list[EngineKind] = args.provider or ["anthropic", "openai"]
    results = anyio.run(bench, shape, kinds)
    if args.json:
        print(json.dumps({"shape": shape.__dict__, "results": results}, sort_keys=True))
    else:
        print(_table(shape, results))
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
