"""Config faults, beyond test_daemon_config.py: byte-exact frozen prompts, and cold starts.

test_daemon_config.py shows that each broken edit is reported and that the
warm session and a new session keep working. Here: the warm session's
system bytes do not move by one byte, a new session gets the last good
identity and purpose (not the broken file), and a daemon started on a
broken org refuses with one clear line instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from harness import DaemonProcess, InProcessDaemon
from test_daemon_config import BREAKAGES, huge_purpose, status_after_edit

from rosterd.client import RosterClient, RpcError
from rosterd.protocol import TurnRequest


async def last_request(client: RosterClient, run: str) -> TurnRequest:
    (request,) = (await client.runs_context(run)).turns
    return request


async def turn(client: RosterClient, worker: str, channel: str, text: str) -> TurnRequest:
    opened = await client.session_open(worker, channel)
    await client.session_send(opened.session, text)
    return await last_request(client, opened.session)


@pytest.mark.anyio
@pytest.mark.parametrize("breakage", [breakage for breakage, _ in BREAKAGES])
async def test_frozen_prompts_do_not_move_and_new_sessions_get_the_last_good_files(
    served: InProcessDaemon, org_dir: Path, breakage: Callable[[Path], None]
) -> None:
    identity = (org_dir / "workers" / "ada" / "identity.md").read_text()
    purpose = (org_dir / "channels" / "general" / "purpose.md").read_text()
    async with await served.client() as client:
        before = await turn(client, "ada", "general", "before the edit")
        breakage(org_dir)
        await status_after_edit(client, lambda s: s.config_error is not None)
        after = await turn(client, "ada", "general", "after the edit")
        fresh_ada = await turn(client, "ada", "releases", "new session, same worker")
        fresh_general = await turn(client, "grace", "general", "new session, same channel")
    assert after.system == before.system
    assert after.messages[: len(before.messages)] == before.messages
    assert identity in fresh_ada.system
    assert purpose in fresh_general.system
    assert "not part of the org" not in fresh_ada.system
    assert len(fresh_general.system) < 20_000


@pytest.mark.anyio
@pytest.mark.parametrize(("breakage", "reported"), BREAKAGES)
async def test_a_daemon_started_on_a_broken_org_refuses_with_one_clear_line(
    org_dir: Path, tmp_path: Path, breakage: Callable[[Path], None], reported: str
) -> None:
    breakage(org_dir)
    process = DaemonProcess(org_dir, tmp_path / "state")
    process.start(wait=False)
    assert process.process is not None
    try:
        code = await anyio.to_thread.run_sync(process.process.wait, 20)
    finally:
        process.kill9()
    log = process.log()
    assert code == 1, log
    assert reported in log
    assert "Traceback" not in log


@pytest.mark.anyio
async def test_a_daemon_started_with_an_oversized_purpose_fails_only_that_channel(
    org_dir: Path, tmp_path: Path
) -> None:
    # Budgets are a compile-time matter: the org loads, the one channel fails clearly.
    huge_purpose(org_dir)
    with DaemonProcess(org_dir, tmp_path / "state").start() as process:
        async with await process.client() as client:
            with pytest.raises(RpcError) as failure:
                await client.session_open("ada", "general")
            elsewhere = await turn(client, "ada", "releases", "other channels work")
    assert failure.value.code == 1001
    assert failure.value.data["block"] == "purpose"
    assert failure.value.data["size"] > failure.value.data["limit"]
    assert "You are Ada" in elsewhere.system
