"""Org edits while the daemon runs: next session only; broken edits keep the last good org."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from harness import DaemonProcess

from rosterd.client import RosterClient


async def status_until(
    client: RosterClient, check: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    with anyio.fail_after(10):
        while True:
            status: dict[str, Any] = await client.call("daemon.status")
            if check(status):
                return status
            await anyio.sleep(0.05)


def break_toml(org: Path) -> None:
    (org / "org.toml").write_text("[workers.ada\nconnections = [")


def delete_identity(org: Path) -> None:
    (org / "workers" / "ada" / "identity.md").unlink()


def huge_purpose(org: Path) -> None:
    (org / "channels" / "general" / "purpose.md").write_text("p" * 1_000_000)


def symlink_outside(org: Path) -> None:
    outside = org.parent / "secret.md"
    outside.write_text("not part of the org\n")
    identity = org / "workers" / "ada" / "identity.md"
    identity.unlink()
    os.symlink(outside, identity)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("breakage", "reported"),
    [
        (break_toml, "invalid TOML"),
        (delete_identity, "identity.md: file is missing"),
        (huge_purpose, "block 'purpose' is 1000"),
        (symlink_outside, "outside the org directory"),
    ],
)
async def test_a_broken_edit_is_reported_and_the_last_good_org_stays(
    daemon: DaemonProcess, org_dir: Path, breakage: Callable[[Path], None], reported: str
) -> None:
    async with await daemon.client() as client:
        warm = (await client.call("session.open", {"worker": "ada", "channel": "general"}))[
            "session"
        ]
        await client.call("session.send", {"session": warm, "text": "before the edit"})
        breakage(org_dir)
        status = await status_until(client, lambda s: s["config_error"] is not None)
        assert reported in status["config_error"]
        # The running session keeps its frozen prompt and still works.
        result = await client.call("session.send", {"session": warm, "text": "after the edit"})
        assert result["turn"] == 2
        # A new session starts from the last good org.
        fresh = await client.call("session.open", {"worker": "grace", "channel": "general"})
        done = await client.call("session.send", {"session": fresh["session"], "text": "hi"})
        assert done["turn"] == 1
    assert "org edit rejected" in daemon.log()


@pytest.mark.anyio
async def test_a_fixed_edit_clears_the_error(daemon: DaemonProcess, org_dir: Path) -> None:
    toml = org_dir / "org.toml"
    good = toml.read_text()
    async with await daemon.client() as client:
        before = await client.call("daemon.status")
        toml.write_text(good.replace("memory = 4000", "memroy = 4000"))
        broken = await status_until(client, lambda s: s["config_error"] is not None)
        assert "memroy" in broken["config_error"]
        toml.write_text(good.replace("memory = 4000", "memory = 3000"))
        fixed = await status_until(client, lambda s: s["config_error"] is None)
    assert fixed["config_generation"] > before["config_generation"]


@pytest.mark.anyio
async def test_an_edit_saved_just_before_open_is_not_missed(
    daemon: DaemonProcess, org_dir: Path
) -> None:
    purpose = org_dir / "channels" / "general" / "purpose.md"
    purpose.write_text("Brand new purpose.\n")
    async with await daemon.client() as client:
        opened = await client.call("session.open", {"worker": "ada", "channel": "general"})
        context = await client.call("runs.show", {"run": opened["session"]})
    blocks = {b["block"]: b for b in context["records"][0]["blocks"]}
    assert blocks["purpose"]["content"] == "<purpose>\nBrand new purpose.\n</purpose>\n"
