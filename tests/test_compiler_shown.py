"""A session turn leaves out what the conversation holds: the compiler's side,
driven by the session's own ledger of what earlier inputs sent."""

from __future__ import annotations

from itertools import count
from pathlib import Path

import pytest
from compiled import lines, run, system, trace
from hypothesis import given, settings
from hypothesis import strategies as st

from rosterd.compiler import (
    Compilation,
    Gate,
    GateIndex,
    MemoryIndex,
    MemoryItem,
    RunMeta,
    ShownItems,
    TurnInput,
    compile_turn,
    held_items,
)
from rosterd.org import Org, Surface, load_org
from rosterd.runtime import ShownLedger

ORG_TOML = """
[engine]
kind = "echo"

[workers.ada.context]
memory = {memory}

[channels.ops]
workers = ["ada"]
"""
START = 1_700_000_000.0


def make_org(root: Path, memory: int = 8000) -> Org:
    (root / "workers" / "ada").mkdir(parents=True)
    (root / "workers" / "ada" / "identity.md").write_text("I am Ada.\n")
    (root / "org.toml").write_text(ORG_TOML.format(memory=memory))
    return load_org(root)


def note(n: int, text: str | None = None, channel: str | None = None) -> MemoryItem:
    return MemoryItem(
        id=f"m-{n}",
        text=text or f"status note {n} " + "x" * 183,
        created_at=START + n,
        channel=channel,
    )


def gate(n: int, outcome: str | None = None) -> Gate:
    return Gate(
        id=f"g-{n}", worker="ada", summary=f"approve {n}?", filed_at=START + n, outcome=outcome
    )


class Chat:
    """A session's compilations, with the ledger a session keeps."""

    def __init__(self, org: Org) -> None:
        self.system = system(org, Surface.SESSION, "ada", "ops", RunMeta("s-1", 0, START))
        self.ledger = ShownLedger()
        self.turn = 0

    def say(
        self,
        memory: tuple[MemoryItem, ...] = (),
        gates: tuple[Gate, ...] = (),
        text: str = "status?",
    ) -> Compilation:
        self.turn += 1
        fresh = TurnInput(
            text=text,
            memory=memory,
            gates=gates,
            shown=self.ledger.items(),
            # As a session passes it: when the previous turn was sent.
            previous_turn_at=START + self.turn - 1 if self.turn > 1 else None,
        )
        compiled = compile_turn(self.system, fresh, RunMeta("s-1", self.turn, START + self.turn))
        self.ledger.note(self.turn, compiled.input_text)
        return compiled


def held(compiled: Compilation, name: str) -> list[tuple[str, int]]:
    """The ids the trace says were left out, with the turn since which."""
    return [(s.id, s.since) for s in trace(compiled, name).already_shown]


def test_an_item_whose_text_changed_is_shown_again(tmp_path: Path) -> None:
    chat = Chat(make_org(tmp_path))
    chat.say(memory=(note(1), note(2)))
    assert lines(chat.say(memory=(note(1), note(2))), "memory") == []
    edited = note(2, "note 2, now with a new pager number")
    third = chat.say(memory=(note(1), edited))
    assert lines(third, "memory") == [{"block": "memory", "id": "m-2", "text": edited.text}]
    assert held(third, "memory") == [("m-1", 1)]
    fourth = chat.say(memory=(note(1), edited))
    assert held(fourth, "memory") == [("m-1", 1), ("m-2", 3)]


def test_the_memory_limit_bounds_each_turn_and_is_spent_on_new_items(tmp_path: Path) -> None:
    chat = Chat(make_org(tmp_path, memory=1000))
    memory = tuple(note(n) for n in range(1, 11))
    shown: list[str] = []
    for _ in range(4):
        compiled = chat.say(memory=memory)
        assert trace(compiled, "memory").rendered_chars <= 1000
        shown += [str(line["id"]) for line in lines(compiled, "memory")]
    # About four 200-character notes fit a turn: three turns show all ten,
    # newest first, each once; the fourth has nothing new.
    assert sorted(shown) == sorted(m.id for m in memory)
    assert shown[:4] == ["m-10", "m-9", "m-8", "m-7"]
    assert trace(compiled, "memory").status == "absent"
    assert len(held(compiled, "memory")) == 10


def test_past_the_first_turn_unrelated_notes_come_only_when_new(tmp_path: Path) -> None:
    chat = Chat(make_org(tmp_path, memory=1000))

    def old(n: int, text: str) -> MemoryItem:
        # Days apart, so that no note lends another score as its neighbour.
        return MemoryItem(id=f"m-{n}", text=text, created_at=START - 86400 * (20 - n))

    unrelated = tuple(
        old(n, f"invoice {n} for the kestrel account " + "x" * 160) for n in range(1, 9)
    )
    memory = (*unrelated, old(9, "the pager rota moved to Tuesdays"))
    first = chat.say(memory=memory, text="how is the pager doing?")
    # The first turn fills the block: the note that matches, then the newest.
    assert [line["id"] for line in lines(first, "memory")] == ["m-9", "m-8", "m-7", "m-6"]

    second = chat.say(memory=memory, text="how is the pager doing?")
    # The older notes that share nothing with the message had their turn.
    assert lines(second, "memory") == []
    block = trace(second, "memory")
    assert (block.status, block.items, block.omitted) == ("omitted", 0, 5)

    # Written since the previous turn, it is new to the conversation; a note
    # that matches comes however old it is.
    added = MemoryItem(id="m-20", text="invoice 20 for the kestrel account", created_at=START + 2.5)
    matches = old(10, "pager batteries replaced")
    third = chat.say(memory=(*memory, matches, added), text="how is the pager doing?")
    assert [line["id"] for line in lines(third, "memory")] == ["m-10", "m-20"]
    assert trace(third, "memory").omitted == 5


def test_first_turn_briefs_everything_then_only_changes(tmp_path: Path) -> None:
    chat = Chat(make_org(tmp_path))
    first = chat.say(gates=(gate(1), gate(2)))
    assert [(b["kind"], b["gate"]) for b in lines(first, "briefing")] == [
        ("gate", "g-1"),
        ("gate", "g-2"),
    ]
    assert chat.say(gates=(gate(1), gate(2))).input_text.count('"block":"briefing"') == 0
    changed = chat.say(gates=(gate(1, outcome="approved"), gate(2), gate(3)))
    assert [(b["kind"], b["gate"]) for b in lines(changed, "briefing")] == [
        ("resolved", "g-1"),
        ("gate", "g-3"),
    ]
    assert held(changed, "briefing") == [("g-2", 1)]
    assert lines(chat.say(gates=(gate(2), gate(3))), "briefing") == []


def test_task_and_direct_runs_show_everything_every_time(tmp_path: Path) -> None:
    org = make_org(tmp_path)
    fresh = TurnInput(text="status?", memory=(note(1), note(2)), gates=(gate(1),))
    for surface, channel in ((Surface.TASK, "ops"), (Surface.DIRECT, None)):
        for turn in (1, 2):
            compiled = run(org, surface, "ada", channel, fresh, RunMeta(f"r-{turn}", 1, START))
            assert [line["id"] for line in lines(compiled, "memory")] == ["m-2", "m-1"]
            assert len(lines(compiled, "briefing")) == 1
            assert held(compiled, "memory") == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(0, 2)), min_size=1, max_size=12))
def test_an_item_is_resent_only_when_its_text_changed(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, int]]
) -> None:
    chat = Chat(make_org(tmp_path_factory.mktemp("org")))
    texts: dict[str, str] = {}
    latest: dict[str, str] = {}  # what the conversation last got, per id
    for n, version in steps:
        texts[f"m-{n}"] = f"status note {n} version {version}"
        memory = tuple(note(int(i[2:]), text) for i, text in sorted(texts.items()))
        compiled = chat.say(memory=memory)
        new = {str(m["id"]): str(m["text"]) for m in lines(compiled, "memory")}
        # Sent: exactly what is new to the conversation, or edited since.
        assert new == {i: t for i, t in texts.items() if latest.get(i) != t}
        # Everything else is traced as already held.
        assert {i for i, _ in held(compiled, "memory")} == texts.keys() - new.keys()
        latest |= new
    assert latest == texts


_WORDS = ("pager", "deploy", "release", "budget", "staging", "review")


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        # Turns come most often: a resolved gate's life in the briefing takes
        # three (shown with its outcome, held, gone).
        st.tuples(
            st.sampled_from(["say", "say", "say", "add", "file", "resolve"]),
            st.sampled_from(_WORDS),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_a_session_s_records_fold_to_what_it_holds(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, bool]]
) -> None:
    """Whatever turns a session traces or throws away, and whatever notes
    arrive and gates are filed or resolved between them, folding its
    records' memory and briefing blocks gives, after each, every item the
    conversation holds, with the turn since which: what a compilation with
    nothing carried over lists whole."""
    org = make_org(tmp_path_factory.mktemp("org"), memory=700)
    chat = Chat(org)
    index = MemoryIndex(note(n, f"{_WORDS[n % 6]} note {n} " + "x" * 150) for n in range(1, 9))
    gates = GateIndex("ada", (gate(n) for n in range(1, 4)))
    open_ids = [f"g-{n}" for n in range(1, 4)]
    numbers = count(4)
    # Gates resolved in the last two traced turns: a briefing shows those
    # resolved since the previous turn, and one resolved as that turn was
    # compiled is held with its outcome in the next.
    resolved: list[list[Gate]] = [[], []]
    folded: dict[str, dict[str, int] | None] = {"memory": None, "briefing": None}
    turn = 0
    for action, word, flag in steps:
        if action == "add":
            n = len(index.snapshot()) + 1
            index.add(note(n, f"{word} note {n}" + (" with more words" if flag else "")))
            continue
        if action == "file":
            n = next(numbers)
            gates.add(gate(n))
            open_ids.append(f"g-{n}")
            continue
        if action == "resolve":
            if open_ids:
                closed = open_ids.pop(0 if flag else -1)
                gates.remove(closed)
                resolved[-1].append(gate(int(closed[2:]), outcome="yes"))
            continue
        memory, briefing = index.snapshot(), gates.snapshot([*resolved[0], *resolved[1]])
        meta = RunMeta("s-1", turn + 1, START + turn + 1)
        chat.ledger.going_on(turn + 1)
        carried = TurnInput(
            text=f"{word}?", memory=memory, gates=briefing, shown=chat.ledger.items()
        )
        compiled = compile_turn(chat.system, carried, meta)
        if not flag:
            continue  # thrown away untraced, as a turn whose reads were stale
        # The same turn with nothing carried over lists every held item.
        items = chat.ledger.items()
        whole = ShownItems(memory=dict(items.memory), gates=dict(items.gates))
        afresh = compile_turn(
            chat.system, TurnInput(f"{word}?", memory=memory, gates=briefing, shown=whole), meta
        )
        for name in folded:
            listed = trace(afresh, name)
            folded[name] = held_items(folded[name], trace(compiled, name))
            assert folded[name] == {item.id: item.since for item in listed.already_shown}
            assert trace(compiled, name).held == listed.held == len(listed.already_shown)
        turn += 1
        chat.ledger.note(turn, compiled.input_text)
        chat.ledger.traced(turn)
        resolved = [resolved[1], []]
