"""Memory ranking: does the worker see the notes that answer the question?

Run as ``.venv/bin/python bench/memory.py [--quick] [--locomo FILE]``. Each
conversation's turns go in as one worker's memory notes ("<date> <speaker>:
<text>"), each question is asked as a direct run (a session turn where the
question belongs to a channel), and the run's trace shows which notes the
memory block held, at the default budgets. It prints, side by side from one
run:

- evidence recall in the block: the share of questions whose evidence notes
  are all in it; beside it BM25 (bm25s, English stopwords) given the same
  number of notes as the block held, question by question;
- R@5 and R@10 of the ranking itself (all evidence in the first 5, 10),
  beside BM25's;
- the ranking's cost per turn with 1,000, 30,000 and 100,000 notes, beside
  compiling the same turn with no memory at all.

The data: a public LongMemEval_S subset (bench/data/memory-dev.json.xz),
cases generated to test one property each (paraphrases, near-duplicates,
long notes among short ones, several channels), and with ``--locomo`` the
held-out LoCoMo file, with dialogue turns and then its annotated facts
(observations) as notes. The ranking is never tuned against LoCoMo.

By default the questions go through a real daemon over its socket; with
``--in-process`` the same compiler runs in this process (faster, the same
blocks: a test checks they agree).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import anyio
import msgspec
from _daemon import serve, write_org
from _memory_data import Conversation, Question, dev_conversations, generated, locomo

from rosterd.client import RosterClient
from rosterd.compiler import (
    MemoryIndex,
    MemoryItem,
    MemoryView,
    RunMeta,
    TurnInput,
    compile_run,
)
from rosterd.org import Org, Surface, load_org

WORKER = "ada"
CHANNELS = ("c0", "c1", "c2")
_T0 = 1_780_000_000.0


@dataclass
class Outcome:
    """One question: the note keys the block held (in rank order), and the
    ranking's first ten keys."""

    question: Question
    block: list[str]
    top: list[str]


def _covered(evidence: Sequence[str], keys: Sequence[str]) -> bool:
    """Whether the notes *keys* cover every evidence turn (a note of facts
    may cite several turns: its key joins them with "|")."""
    held = {turn for key in keys for turn in key.split("|")}
    return all(e in held for e in evidence)


# --- through this process's compiler --------------------------------------------


def _items(conversation: Conversation) -> list[MemoryItem]:
    return [
        MemoryItem(id=f"m-{n + 1}", text=text, created_at=_T0 + n * 0.002, channel=channel)
        for n, (_, text, channel) in enumerate(conversation.notes)
    ]


def in_process(org: Org, conversation: Conversation) -> list[Outcome]:
    items = _items(conversation)
    keys = {item.id: key for item, (key, _, _) in zip(items, conversation.notes, strict=True)}
    view = MemoryIndex(items).snapshot()
    outcomes = []
    for n, question in enumerate(conversation.questions):
        surface = Surface.DIRECT if question.channel is None else Surface.SESSION
        scope = org.scope(surface, WORKER, question.channel)
        meta = RunMeta(run=f"q{n}", turn=1, now=_T0 + 86_400)
        turn = TurnInput(
            text=question.text, memory=view, history=None if scope.channel is None else ()
        )
        record = compile_run(org, scope, turn, meta).record
        (memory,) = (b for b in record.blocks if b.block == "memory")
        block = [keys[note.id] for note in memory.notes or ()]
        ranking = view.ranking(question.text, scope.channel)
        top = [keys[r.item.id] for r in islice(ranking, 10)]
        outcomes.append(Outcome(question, block, top))
    return outcomes


# --- through a daemon --------------------------------------------------------------


async def through_daemon(root: Path, conversations: list[Conversation]) -> list[Outcome]:
    """Every conversation in a state of its own (its worker's memory), one
    daemon each after the other; notes added and questions asked over the
    socket, blocks read back from the traces."""
    outcomes = []
    for conversation in conversations:
        state = Path(tempfile.mkdtemp(dir=root))
        socket = state / "rosterd.sock"
        async with serve(root / "org", state, socket), await RosterClient.connect(socket) as client:
            keys = {}
            for key, text, channel in conversation.notes:
                note = await client.memory_add(WORKER, text, channel)
                keys[note.id] = key
            for question in conversation.questions:
                if question.channel is None:
                    run = (await client.run_direct(WORKER, question.text)).run
                else:
                    opened = await client.session_open(WORKER, question.channel)
                    run = (await client.session_send(opened.session, question.text)).run
                    await client.session_close(opened.session)
                page = await client.runs_context(run)
                sent = page.turns[-1].messages[-1].content
                block = [
                    keys[_decode(line)["id"]]
                    for line in sent.splitlines()
                    if line.startswith('{"block":"memory"')
                ]
                outcomes.append(Outcome(question, block, []))
    return outcomes


# --- BM25 beside it -------------------------------------------------------------------


_decode = msgspec.json.Decoder(dict[str, str]).decode


def bm25_rankings(conversation: Conversation) -> Callable[[str, str | None, int], list[str]]:
    """bm25s over the notes a question's run may see, English stopwords, no stemmer."""
    import bm25s  # type: ignore[import-untyped]

    retrievers = {}
    for channel in {None, *(q.channel for q in conversation.questions)}:
        notes = [(k, t) for k, t, c in conversation.notes if c in (None, channel)]
        retriever = bm25s.BM25()
        retriever.index(
            bm25s.tokenize([t for _, t in notes], stopwords="en", show_progress=False),
            show_progress=False,
        )
        retrievers[channel] = (retriever, [k for k, _ in notes])

    def ranked(text: str, channel: str | None, k: int) -> list[str]:
        retriever, keys = retrievers[channel]
        k = min(k, len(keys))
        if k == 0:
            return []
        query = bm25s.tokenize([text], stopwords="en", show_progress=False)
        if not query.vocab:
            return keys[:k]
        found, _ = retriever.retrieve(query, k=k, show_progress=False)
        return [keys[int(i)] for i in found[0]]

    return ranked


# --- report ---------------------------------------------------------------------------


def report(name: str, conversations: list[Conversation], outcomes: list[Outcome]) -> None:
    by_conversation = {}
    at = 0
    for conversation in conversations:
        by_conversation[conversation.id] = outcomes[at : at + len(conversation.questions)]
        at += len(conversation.questions)
    ours = theirs = r5 = r10 = b5 = b10 = 0
    sizes = []
    total = 0
    for conversation in conversations:
        bm25 = bm25_rankings(conversation)
        for outcome in by_conversation[conversation.id]:
            question = outcome.question
            total += 1
            size = len(outcome.block)
            sizes.append(size)
            ours += _covered(question.evidence, outcome.block)
            theirs += _covered(question.evidence, bm25(question.text, question.channel, size))
            if outcome.top:
                r5 += _covered(question.evidence, outcome.top[:5])
                r10 += _covered(question.evidence, outcome.top[:10])
            top = bm25(question.text, question.channel, 10)
            b5 += _covered(question.evidence, top[:5])
            b10 += _covered(question.evidence, top)

    def share(n: int) -> float:
        return 100.0 * n / max(total, 1)

    print(
        f"{name:<34} {total:>5} {statistics.median(sizes) if sizes else 0:>6.0f} "
        f"{share(ours):>7.1f} {share(theirs):>7.1f} {share(ours) - share(theirs):>+6.1f}"
        + (
            f" {share(r5):>6.1f} {share(b5):>6.1f} {share(r10):>6.1f} {share(b10):>6.1f}"
            if outcomes and outcomes[0].top
            else ""
        )
    )


def header(in_process: bool) -> None:
    print(
        f"{'data':<34} {'qs':>5} {'notes':>6} {'block%':>7} {'bm25%':>7} {'ahead':>6}"
        + (f" {'R@5':>6} {'bm25':>6} {'R@10':>6} {'bm25':>6}" if in_process else "")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a third of the dev data, fewer cost rounds"
    )
    parser.add_argument(
        "--in-process", action="store_true", help="compile here, not through a daemon"
    )
    parser.add_argument(
        "--locomo", type=Path, help="LoCoMo's locomo10.json: the held-out benchmark"
    )
    parser.add_argument("--dev", type=Path, help="a dev data file other than the bundled one")
    args = parser.parse_args(argv)
    sets: list[tuple[str, list[Conversation]]] = []
    dev = dev_conversations(args.dev) if args.dev else dev_conversations()
    dev_name = f"{args.dev.name} (dev)" if args.dev else "LongMemEval_S subset (dev)"
    sets.append((dev_name, dev[::3] if args.quick else dev))
    sets.append(("generated cases", generated()))
    if args.locomo:
        sets.append(("LoCoMo, dialogue turns (held out)", locomo(args.locomo, facts=False)))
        sets.append(("LoCoMo, annotated facts (held out)", locomo(args.locomo, facts=True)))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # One worker in every channel, the echo engine, default budgets.
        write_org(root / "org", (WORKER,), len(CHANNELS), identity_lines=1)
        org = load_org(root / "org")
        print(
            "evidence all in the memory block (default budgets), beside BM25 given as many notes:"
        )
        header(args.in_process)
        for name, conversations in sets:
            if args.in_process:
                outcomes = [o for c in conversations for o in in_process(org, c)]
            else:
                outcomes = anyio.run(through_daemon, root, conversations)
            report(name, conversations, outcomes)
        if not args.in_process:
            print("ranking itself, R@k (in process, the same compiler):")
            header(True)
            for name, conversations in sets:
                outcomes = [o for c in conversations for o in in_process(org, c)]
                report(name, conversations, outcomes)
        cost(org, quick=args.quick)
    return 0


def cost(org: Org, quick: bool) -> None:
    """Compile time of one direct run's turn with N notes, beside no notes."""
    import random

    rng = random.Random(1)
    vocabulary = [f"w{n}" for n in range(20_000)]
    scope = org.scope(Surface.DIRECT, WORKER, None)
    print("ranking cost per turn (compile of a direct run, median of rounds):")
    print(f"{'notes':>8} {'ms':>8} {'ratio to 0':>11}")
    empty = MemoryIndex().snapshot()
    views: list[tuple[int, MemoryView]] = [(0, empty)]
    for size in (1_000, 30_000, 100_000):
        items = [
            MemoryItem(
                id=f"m-{n + 1}",
                text=f"2026-03-{1 + n % 28:02d} user: " + " ".join(rng.choices(vocabulary, k=14)),
                created_at=_T0 + n,
            )
            for n in range(size)
        ]
        views.append((size, MemoryIndex(items).snapshot()))
    questions = [" ".join(rng.choices(vocabulary, k=6)) + " user?" for _ in range(50)]
    rounds = 3 if quick else 7
    times: dict[int, list[float]] = {size: [] for size, _ in views}
    for _ in range(rounds):
        for size, view in views:
            start = time.perf_counter()
            for n, question in enumerate(questions):
                meta = RunMeta(run=f"r{n}", turn=1, now=_T0)
                compile_run(org, scope, TurnInput(text=question, memory=view), meta)
            times[size].append((time.perf_counter() - start) / len(questions))
    base = statistics.median(times[0])
    for size, _ in views:
        median = statistics.median(times[size])
        print(f"{size:>8} {median * 1000:>8.3f} {median / base:>11.2f}")
    print("(the daemon's turn p50 at 100,000 notes against none: bench/load.py)")


if __name__ == "__main__":
    sys.exit(main())
