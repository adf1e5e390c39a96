"""The block names and their order: what every compilation and record follows."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import get_args

import msgspec
import pytest

import rosterd.compiler
from rosterd.compiler import (
    ADVISORY,
    ADVISORY_ORDER,
    REQUEST_BLOCKS,
    ROOM_ORDER,
    SHRINK_RULE,
    SYSTEM_ORDER,
    AdvisoryBlock,
    BlockName,
    ChannelMessage,
    Continuation,
    Gate,
    MemoryItem,
    RunMeta,
    ToolResult,
    TurnInput,
    _blocks,
    compile_run,
    compile_step,
    compile_system,
    compile_turn,
    dry_run,
)
from rosterd.org import ContextBudget, ContextOverlay, Org, Surface, load_org

META = RunMeta(run="r-1", turn=1, now=1_700_000_000.0)
TURN = TurnInput(
    text="what is open?",
    sender="alice",
    memory=(MemoryItem(id="m-1", text="a note", created_at=1.0),),
    gates=(Gate(id="g-1", worker="ada", summary="ship it?", filed_at=1.0),),
    continuation=Continuation(gate="g-0", summary="go?", outcome="yes"),
)


@pytest.fixture
def org(example_org: Path) -> Org:
    return load_org(example_org)


def test_a_run_record_holds_every_block_once_in_the_contract_order(org: Org) -> None:
    for surface, request in ((Surface.TASK, "task"), (Surface.DIRECT, "message")):
        channel = "general" if surface is Surface.TASK else None
        record = compile_run(org, org.scope(surface, "ada", channel), TURN, META).record
        names = [b.block for b in record.blocks]
        assert names == [*SYSTEM_ORDER, *ADVISORY_ORDER, request]
        assert record.tools is not None and record.tools.block == "tools"


def test_a_session_has_the_system_part_then_per_turn_the_input_part(org: Org) -> None:
    system = compile_system(org, org.scope(Surface.SESSION, "ada", "general"), META)
    assert [b.block for b in system.record(META).blocks] == list(SYSTEM_ORDER)
    turn = compile_turn(system, TURN, META).record
    assert [b.block for b in turn.blocks] == [*ADVISORY_ORDER, "message"]
    result = ToolResult(call="c-1", connection="github", status="ok", text="{}")
    _, step = compile_step(turn, [result, result], 1000, META, 2)
    assert [b.block for b in step.blocks] == ["tool", "tool"]


def test_every_block_a_dry_run_traces_is_a_block_name(org: Org) -> None:
    names = set(get_args(BlockName))
    assert set(SYSTEM_ORDER) | set(ADVISORY_ORDER) | set(REQUEST_BLOCKS) <= names
    for run in dry_run(org):
        assert {b.block for b in run.blocks} <= names


def test_each_advisory_block_is_registered_once_with_its_budget_key() -> None:
    names = [spec.name for spec in ADVISORY]
    assert len(set(names)) == len(names) and set(names) == set(get_args(AdvisoryBlock))
    assert sorted(spec.room for spec in ADVISORY) == list(range(len(ADVISORY)))
    # The name is the budget key in [context] and in every worker's overlay
    # (derived from [context]).
    budget_keys = {f.name for f in msgspec.structs.fields(ContextBudget)}
    overlay = msgspec.structs.fields(ContextOverlay)
    assert [f.name for f in overlay] == [f.name for f in msgspec.structs.fields(ContextBudget)]
    assert all(f.default is None for f in overlay)
    assert set(names) <= budget_keys
    assert {spec.name: spec.shrinks for spec in ADVISORY} == SHRINK_RULE


def test_blocks_get_room_in_their_order_so_the_last_shrinks_first(org: Org) -> None:
    # Every advisory block has items, each of about the whole room: the
    # first block (of those with a budget) to get room takes it, and the
    # ones after it get none.
    long = "x" * 3000
    messages = tuple(ChannelMessage(seq=n, sender="bo", text=long, at=1.0) for n in range(1, 4))
    turn = TurnInput(
        text="go",
        sender="alice",
        memory=tuple(MemoryItem(id=f"m-{n}", text=long, created_at=n) for n in range(3)),
        gates=tuple(Gate(id=f"g-{n}", worker="ada", summary=long, filed_at=n) for n in range(3)),
        history=messages,
        backlog=messages,
    )
    # The contract's order of sacrifice: memory first, briefing last.
    assert [spec.name for spec in ROOM_ORDER] == ["briefing", "history", "backlog", "memory"]
    system = compile_system(org, org.scope(Surface.DIRECT, "ada", None), META)
    total = system.boundaries[2].offset + 3300
    for first, spec in enumerate(ROOM_ORDER):
        # The blocks before it have no budget of their own.
        zeroed = {earlier.name: 0 for earlier in ROOM_ORDER[:first]}
        budget = msgspec.structs.replace(system.budget, total=total, **zeroed)
        fitted = compile_turn(msgspec.structs.replace(system, budget=budget), turn, META)
        kept = {b.block: b.items for b in fitted.record.blocks}
        assert kept[spec.name] == 1
        assert all(kept[later.name] == 0 for later in ROOM_ORDER[first + 1 :])


def test_the_package_docstring_maps_every_block_to_a_renderer_that_exists() -> None:
    mapped: set[str] = set()
    for line in (rosterd.compiler.__doc__ or "").splitlines():
        # A renderer lives in ``_blocks`` unless the row names its module.
        row = re.fullmatch(r"([a-z, ]+?)\s{2,}(``\w+``(?:, ``\w+``)*)(?: \(``(\w+)``\))?", line)
        if row is None or row[1] == "block":
            continue
        mapped |= set(row[1].split(", "))
        module = importlib.import_module(f"rosterd.compiler.{row[3]}") if row[3] else _blocks
        for renderer in re.findall(r"``(\w+)``", row[2]):
            assert callable(getattr(module, renderer)), renderer
    assert mapped == set(get_args(BlockName))
