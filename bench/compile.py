"""How long one session turn takes to compile, against two yardsticks.

Run as ``.venv/bin/python bench/compile.py [--quick]``. It prints, from one
run and side by side:

- the daemon's per-turn path (``compile_turn`` against a frozen system part,
  then the next request built from the append-only transcript) at
  transcript lengths 10 and 1000: the compiler never sees the transcript, so
  the ratio should be about 1;
- the "floor": merely JSON-encoding (msgspec) and sha256-hashing the same
  fresh turn input, and the compile time divided by it.

Times are the minimum and median over rounds of per-turn averages; the
variants are interleaved round by round so that machine noise hits all of
them alike. Nothing here asserts an absolute time.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path

import msgspec

from rosterd.compiler import (
    Gate,
    GateIndex,
    MemoryIndex,
    MemoryItem,
    MemoryView,
    RunMeta,
    SystemPrompt,
    TurnInput,
    compile_system,
    compile_turn,
)
from rosterd.engines import EngineRequest
from rosterd.org import Surface, load_org
from rosterd.protocol import ChatMessage

EXAMPLE_ORG = Path(__file__).resolve().parent.parent / "examples" / "org"
WORKER, CHANNEL = "ada", "general"
VOCABULARY = [
    "release",
    "branch",
    "review",
    "patch",
    "issue",
    "deploy",
    "staging",
    "cache",
    "budget",
    "token",
    "worker",
    "gate",
    "memory",
    "note",
    "customer",
    "invoice",
    "latency",
    "migration",
    "schema",
    "index",
    "rollback",
    "incident",
    "postmortem",
    "retry",
    "timeout",
    "queue",
    "backlog",
    "sprint",
    "roadmap",
    "design",
    "spec",
    "test",
    "flaky",
    "build",
    "pipeline",
    "artifact",
    "docker",
    "kernel",
    "socket",
    "daemon",
    "session",
    "channel",
    "purpose",
    "identity",
]


def memory_items(rng: random.Random, count: int) -> tuple[MemoryItem, ...]:
    """Notes of 10 to 40 words, a third of them scoped to the channel."""
    return tuple(
        MemoryItem(
            id=f"mem-{i:04d}",
            text=" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(10, 40))) + ".",
            created_at=1_700_000_000.0 + i * 3600,
            channel=CHANNEL if i % 3 == 0 else None,
        )
        for i in range(count)
    )


def gates(rng: random.Random) -> tuple[Gate, ...]:
    return tuple(
        Gate(
            id=f"gate-{i}",
            worker=WORKER,
            summary=f"Approve the {rng.choice(VOCABULARY)} change before the release?",
            filed_at=1_700_000_000.0 + i,
            channel=CHANNEL if i % 2 else None,
        )
        for i in range(4)
    )


def messages(rng: random.Random, count: int) -> list[str]:
    """Fresh chat messages, each different, so nothing is cached across turns."""
    return [
        f"({i}) " + " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(20, 60))) + "?"
        for i in range(count)
    ]


class Turns:
    """The per-turn path of a warm session, and the floor, over fresh inputs."""

    def __init__(
        self, system: SystemPrompt, inputs: list[TurnInput], plain: dict[str, TurnInput]
    ) -> None:
        self.system = system
        self.inputs = inputs
        # The floor encodes each input with its plain items, as a request would carry them.
        self.plain = plain
        self.next = 0
        self.encoder = msgspec.json.Encoder()

    def fresh(self) -> tuple[TurnInput, RunMeta]:
        i = self.next = (self.next + 1) % len(self.inputs)
        return self.inputs[i], RunMeta(run="sess-bench", turn=i, now=1_700_000_000.0 + i)

    def compile_only(self) -> Callable[[], float]:
        def one() -> float:
            turn, meta = self.fresh()
            start = time.perf_counter()
            compile_turn(self.system, turn, meta)
            return time.perf_counter() - start

        return one

    def session_turn(self, transcript_length: int) -> Callable[[], float]:
        """compile_turn, then the request: the transcript plus the new message."""
        transcript = [
            ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"earlier {i}")
            for i in range(transcript_length)
        ]

        def one() -> float:
            turn, meta = self.fresh()
            start = time.perf_counter()
            compiled = compile_turn(self.system, turn, meta)
            transcript.append(ChatMessage(role="user", content=compiled.input_text))
            EngineRequest(system=compiled.system, messages=tuple(transcript))
            elapsed = time.perf_counter() - start
            # Keep the length fixed for the next round (the daemon appends the reply).
            transcript.pop()
            return elapsed

        return one

    def ranking(self, take: int) -> Callable[[], float]:
        """The part of compile_turn the floor has no counterpart for: ranking
        the notes, as far as a compilation takes them (*take*)."""
        scope = self.system.scope

        def one() -> float:
            turn, _ = self.fresh()
            start = time.perf_counter()
            assert isinstance(turn.memory, MemoryView)  # the bench passes the store's view
            list(islice(turn.memory.ranked(turn.text, scope.channel), take))
            return time.perf_counter() - start

        return one

    def floor(self) -> Callable[[], float]:
        def one() -> float:
            turn, _ = self.fresh()
            start = time.perf_counter()
            hashlib.sha256(self.encoder.encode(self.plain[turn.text])).hexdigest()
            return time.perf_counter() - start

        return one


def measure(
    variants: dict[str, Callable[[], float]], rounds: int, per_round: int
) -> dict[str, list[float]]:
    """Per-turn averages of each round, variants interleaved round by round."""
    results: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, one in variants.items():
            results[name].append(sum(one() for _ in range(per_round)) / per_round)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few rounds, for tests")
    parser.add_argument("--memory", type=int, default=50, help="memory items per turn")
    args = parser.parse_args(argv)
    rounds, per_round = (5, 20) if args.quick else (30, 200)

    rng = random.Random(20240601)
    org = load_org(EXAMPLE_ORG)
    scope = org.scope(Surface.SESSION, WORKER, CHANNEL)
    system = compile_system(org, scope, RunMeta(run="sess-bench", turn=0, now=1_700_000_000.0))
    memory = memory_items(rng, args.memory)
    open_gates = gates(rng)
    # As the daemon does: the stores hand over snapshots of their indexes.
    memory_view = MemoryIndex(memory).snapshot()
    gate_view = GateIndex(WORKER, open_gates).snapshot()
    texts = messages(rng, 4096)
    plain = {
        text: TurnInput(text=text, sender="alice", memory=memory, gates=open_gates)
        for text in texts
    }
    inputs = [
        TurnInput(text=text, sender="alice", memory=memory_view, gates=gate_view) for text in texts
    ]
    turns = Turns(system, inputs, plain)
    sample = compile_turn(system, inputs[0], RunMeta(run="sess-bench", turn=0, now=0.0))
    blocks = {b.block: b for b in sample.record.blocks}
    floor_bytes = len(msgspec.json.encode(plain[inputs[0].text]))

    variants = {
        "compile_turn": turns.compile_only(),
        "turn@10": turns.session_turn(10),
        "turn@1000": turns.session_turn(1000),
        # The items shown and the first that did not fit.
        "ranking": turns.ranking(blocks["memory"].items + 1),
        "floor": turns.floor(),
    }
    measure(variants, 1, per_round)  # warm up caches and the allocator
    results = measure(variants, rounds, per_round)
    best = {name: min(values) for name, values in results.items()}
    median = {name: statistics.median(values) for name, values in results.items()}

    def us(seconds: float) -> str:
        return f"{seconds * 1e6:8.1f} us"

    memory_block = blocks["memory"]
    print(
        f"input: {args.memory} memory items ({memory_block.items} fit in "
        f"{memory_block.limit} chars), {len(open_gates)} gates, fresh message per turn; "
        f"input text {len(sample.input_text)} chars, floor bytes {floor_bytes}"
    )
    print(f"rounds: {rounds} x {per_round} turns{' (quick)' if args.quick else ''}")
    print(f"{'':44s}{'min':>11s}  {'median':>11s}")
    labels = {
        "compile_turn": "compile_turn alone",
        "turn@10": "per-turn path, transcript of 10 messages",
        "turn@1000": "per-turn path, transcript of 1000 messages",
        "ranking": "  of which: ranking the notes it takes",
        "floor": "floor: msgspec encode + sha256 of the input",
    }
    for name, label in labels.items():
        print(f"{label:44s}{us(best[name])}  {us(median[name])}")
    print(
        f"ratio transcript 1000 / 10: {best['turn@1000'] / best['turn@10']:.2f} (min)  "
        f"{median['turn@1000'] / median['turn@10']:.2f} (median)"
    )
    print(
        f"ratio compile_turn / floor: {best['compile_turn'] / best['floor']:.2f}x (min)  "
        f"{median['compile_turn'] / median['floor']:.2f}x (median), target < 3x"
    )
    rest = best["compile_turn"] - best["ranking"]
    print(f"ratio compile_turn without ranking / floor: {rest / best['floor']:.2f}x (min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
