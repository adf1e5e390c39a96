"""The block names and their order: what every compilation and record follows."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import get_args

import pytest

import rosterd.compiler
from rosterd.compiler import (
    ADVISORY_ORDER,
    REQUEST_BLOCKS,
    SYSTEM_ORDER,
    BlockName,
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
from rosterd.org import Org, Surface, load_org

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
