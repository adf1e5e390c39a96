"""Every error a client can get has its own documented code; none is a bare 1000."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harness import REPO, DaemonProcess, InProcessDaemon, set_engine
from simulator import Simulator

from rosterd import protocol
from rosterd.client import RpcError

pytestmark = pytest.mark.anyio


def protocol_codes() -> set[int]:
    """The error codes the protocol module defines: JSON-RPC's and ours."""
    return {
        value
        for name, value in vars(protocol).items()
        if name.isupper()
        and isinstance(value, int)
        and (-32768 <= value <= -32000 or 1000 <= value <= 1999)
    }


def readme_codes() -> set[int]:
    text = (REPO / "docs" / "protocol.md").read_text()
    return {int(code) for code in re.findall(r"^\| (-?\d+) \|", text, re.M)}


def test_the_protocol_docs_list_every_code_the_protocol_defines() -> None:
    assert protocol_codes(), "the protocol module defines error codes"
    assert readme_codes() == protocol_codes()


def test_no_code_is_the_bare_roster_error() -> None:
    assert 1000 not in protocol_codes()


async def test_resolving_a_resolved_gate_is_a_conflict(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        gate = await client.gate_file("ada", "ship it?")
        await client.gate_resolve(gate.id, "yes")
        with pytest.raises(RpcError) as failure:
            await client.gate_resolve(gate.id, "no")
        kept = await client.gate_list()
    assert failure.value.code == 1009
    assert "already resolved (yes)" in str(failure.value)
    (same,) = [g for g in kept if g.id == gate.id]
    assert (same.status, same.outcome) == ("resolved", "yes")


async def test_a_gate_on_another_workers_run_is_a_conflict(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        run = (await client.run_direct("ada", "hi")).run
        with pytest.raises(RpcError) as failure:
            await client.gate_file("grace", "mine?", run=run)
    assert failure.value.code == 1009
    assert "belongs to worker 'ada'" in str(failure.value)


async def test_the_context_of_a_run_with_no_turns_is_a_conflict(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        opened = await client.session_open("ada", "general")
        with pytest.raises(RpcError) as failure:
            await client.runs_context(opened.session)
    assert failure.value.code == 1009
    assert "has no turns yet" in str(failure.value)


async def test_a_prompt_over_the_context_window_says_so_on_the_wire(
    org_dir: Path, tmp_path: Path
) -> None:
    async with Simulator(context_tokens=100, server="llama.cpp") as sim:
        set_engine(org_dir, f'kind = "openai"\nmodel = "m"\nbase_url = "{sim.openai_url}"')
        with DaemonProcess(org_dir, tmp_path / "state").start() as process:
            async with await process.client() as client:
                with pytest.raises(RpcError) as failure:
                    await client.run_direct("ada", "hi")
    assert failure.value.code == 1002
    assert failure.value.data["context_exceeded"] is True
    assert failure.value.data["status"] == 400
    assert "exceeds the available context size" in str(failure.value)
