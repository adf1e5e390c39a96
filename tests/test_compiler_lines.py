"""Memory and gate lines are rendered once and reused: what a line says
always follows the item's current text, however many items came between."""

from __future__ import annotations

import msgspec
from harness import EXAMPLE_ORG

from rosterd.compiler import (
    Gate,
    MemoryItem,
    RunMeta,
    SystemPrompt,
    TurnInput,
    compile_system,
    compile_turn,
)
from rosterd.org import Surface, load_org

META = RunMeta(run="run-lines", turn=1, now=1_700_000_000.0)


def _system() -> SystemPrompt:
    org = load_org(EXAMPLE_ORG)
    return compile_system(org, org.scope(Surface.SESSION, "ada", "general"), META)


def _compiled(system: SystemPrompt, turn: TurnInput) -> bytes:
    return msgspec.json.encode(compile_turn(system, turn, META))


def test_an_edited_note_or_resolved_gate_renders_its_new_text() -> None:
    system = _system()
    note = MemoryItem(id="m-1", text="the release is on friday", created_at=1.0)
    gate = Gate(id="g-1", worker="ada", summary="ship it?", filed_at=1.0)
    before = compile_turn(system, TurnInput(text="release", memory=(note,), gates=(gate,)), META)
    edited = msgspec.structs.replace(note, text="the release moved to monday")
    resolved = msgspec.structs.replace(gate, outcome="approved", note="go")
    after = compile_turn(
        system, TurnInput(text="release", memory=(edited,), gates=(resolved,)), META
    )
    assert "friday" in before.input_text and "friday" not in after.input_text
    assert "monday" in after.input_text
    assert '"kind":"gate"' in before.input_text
    assert '"kind":"resolved"' in after.input_text and '"outcome":"approved"' in after.input_text


def test_output_is_the_same_after_the_line_caches_overflow() -> None:
    system = _system()
    notes = tuple(
        MemoryItem(id=f"m-{i}", text=f"note {i} about the release", created_at=float(i))
        for i in range(40)
    )
    gates = tuple(
        Gate(id=f"g-{i}", worker="ada", summary=f"approve {i}?", filed_at=float(i))
        for i in range(6)
    )
    turn = TurnInput(text="what about the release?", memory=notes, gates=gates)
    first = _compiled(system, turn)
    # More distinct lines than the caches hold (megabytes of them).
    for round_ in range(12):
        big = tuple(
            MemoryItem(id=f"big-{round_}-{i}", text="x" * 60_000, created_at=0.0) for i in range(8)
        )
        wide = tuple(
            Gate(id=f"w-{round_}-{i}", worker="ada", summary="y" * 20_000, filed_at=0.0)
            for i in range(8)
        )
        compile_turn(system, TurnInput(text="filler", memory=big, gates=wide), META)
    assert _compiled(system, turn) == first
