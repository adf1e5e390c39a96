"""Org edits while the daemon runs: next session only; broken edits keep the last good org."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import DaemonProcess, InProcessDaemon, set_daemon

from rosterd.cli import main
from rosterd.client import RosterClient, RpcError
from rosterd.compiler import ContextRecord
from rosterd.protocol import StatusResult


async def status_after_edit(
    client: RosterClient, check: Callable[[StatusResult], bool]
) -> StatusResult:
    """``daemon.status``, which reflects every edit saved before the call;
    *check* must hold for it."""
    status = await client.daemon_status()
    assert check(status), status
    return status


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


def nest_toml(org: Path) -> None:
    # Valid TOML up to a depth no parser recursion survives.
    depth = 100_000
    with (org / "org.toml").open("a") as toml:
        toml.write(f"\n[engines.deep]\nfallback = {'[' * depth}{']' * depth}\n")


def fifo_identity(org: Path) -> None:
    # Reading a FIFO waits for a writer that never comes.
    identity = org / "workers" / "ada" / "identity.md"
    identity.unlink()
    os.mkfifo(identity)


def huge_identity(org: Path) -> None:
    # Sparse: a disk image copied in by mistake costs the test no disk.
    os.truncate(org / "workers" / "ada" / "identity.md", 1 << 30)


def endless_idle(org: Path) -> None:
    # An "inf" meant as "never expire": a deadline that is no deadline.
    set_daemon(org, "session_idle_s = inf")


# Each broken edit, and what the daemon reports of it.
BREAKAGES: list[tuple[Callable[[Path], None], str]] = [
    (break_toml, "invalid TOML"),
    (delete_identity, "identity.md: file is missing"),
    (symlink_outside, "outside the org directory"),
    (nest_toml, "nested too deeply"),
    (fifo_identity, "identity.md: not a regular file"),
    (huge_identity, "the largest file an org may hold"),
    (endless_idle, "`daemon.session_idle_s`: Expected `float` <= 604800"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("breakage", "reported"), BREAKAGES)
async def test_a_broken_edit_is_reported_and_the_last_good_org_stays(
    served: InProcessDaemon, org_dir: Path, breakage: Callable[[Path], None], reported: str
) -> None:
    async with await served.client() as client:
        warm = (await client.session_open("ada", "general")).session
        await client.session_send(warm, "before the edit")
        breakage(org_dir)
        status = await status_after_edit(client, lambda s: s.config_error is not None)
        assert reported in (status.config_error or "")
        # The running session keeps its frozen prompt and still works.
        result = await client.session_send(warm, "after the edit")
        assert result.turn == 2
        # A new session starts from the last good org.
        fresh = await client.session_open("grace", "general")
        done = await client.session_send(fresh.session, "hi")
        assert done.turn == 1
    assert "org edit rejected" in served.log()


@pytest.mark.anyio
async def test_a_fixed_edit_clears_the_error(served: InProcessDaemon, org_dir: Path) -> None:
    toml = org_dir / "org.toml"
    good = toml.read_text()
    async with await served.client() as client:
        before = await client.daemon_status()
        toml.write_text(good.replace("memory = 4000", "memroy = 4000"))
        broken = await status_after_edit(client, lambda s: s.config_error is not None)
        assert "memroy" in (broken.config_error or "")
        toml.write_text(good.replace("memory = 4000", "memory = 3000"))
        fixed = await status_after_edit(client, lambda s: s.config_error is None)
    assert fixed.config_generation > before.config_generation


@pytest.mark.anyio
async def test_an_edit_saved_just_before_open_is_not_missed(
    served: InProcessDaemon, org_dir: Path
) -> None:
    purpose = org_dir / "channels" / "general" / "purpose.md"
    purpose.write_text("Brand new purpose.\n")
    async with await served.client() as client:
        opened = await client.session_open("ada", "general")
        context = await client.runs_show(opened.session)
    blocks = {b.block: b for b in context.records[0].blocks}
    assert blocks["purpose"].content == "<purpose>\nBrand new purpose.\n</purpose>\n"


def bigfoot_org(root: Path) -> Path:
    """Two workers in #ops; bigfoot's identity is 13,000 characters, over 12,000."""
    for worker, identity in (("bigfoot", "b" * 13_000), ("kestrel", "You are Kestrel.\n")):
        (root / "workers" / worker).mkdir(parents=True)
        (root / "workers" / worker / "identity.md").write_text(identity)
    (root / "org.toml").write_text(
        '[workers.bigfoot]\n[workers.kestrel]\n[channels.ops]\nworkers = ["bigfoot", "kestrel"]\n'
    )
    return root


def identity_of(records: list[ContextRecord]) -> str:
    system = next(r for r in records if r.kind == "system")
    return next(b.content for b in system.blocks if b.block == "identity")


@pytest.mark.anyio
async def test_one_scope_over_budget_at_start_never_blocks_other_edits(tmp_path: Path) -> None:
    org = bigfoot_org(tmp_path / "org")
    with DaemonProcess(org, tmp_path / "state").start() as process:
        async with await process.client() as client:
            status = await client.daemon_status()
            assert status.config_error is None
            over = {(p.worker, p.channel, p.surface) for p in status.over_budget}
            assert over == {
                ("bigfoot", "ops", "session"),
                ("bigfoot", "ops", "task"),
                ("bigfoot", None, "direct"),
            }
            assert {(p.block, p.size, p.limit) for p in status.over_budget} == {
                ("identity", 13_000 + len("<identity>\n\n</identity>\n"), 12_000)
            }
            first = await client.session_open("kestrel", "ops")
            await client.session_send(first.session, "hi")
            await client.session_close(first.session)

            (org / "workers" / "kestrel" / "identity.md").write_text("You are Kestrel, v2.\n")
            await status_after_edit(
                client, lambda s: s.config_generation > status.config_generation
            )
            second = await client.session_open("kestrel", "ops")
            await client.session_send(second.session, "hi")
            shown = await client.runs_show(second.session)
            with pytest.raises(RpcError) as failure:
                await client.session_open("bigfoot", "ops")
            later = await client.daemon_status()
    assert "You are Kestrel, v2." in identity_of(shown.records)
    assert failure.value.code == 1001
    assert failure.value.data["block"] == "identity"
    assert "identity" in str(failure.value)
    assert later.config_error is None
    assert {p.worker for p in later.over_budget} == {"bigfoot"}
    log = process.log()
    assert "org edit rejected" not in log
    assert "scope over budget, its runs fail until fixed: bigfoot session #ops" in log


def test_check_fails_naming_the_scope_over_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    org = bigfoot_org(tmp_path / "org")
    assert main(["check", "--org", str(org)]) == 1
    problems = capsys.readouterr().err.splitlines()
    assert len(problems) == 1
    assert "block 'identity' is 13024 characters, over its limit of 12000" in problems[0]
    assert "bigfoot session #ops" in problems[0]
    assert "kestrel" not in problems[0]


@pytest.mark.anyio
async def test_an_edit_over_budget_is_accepted_and_fails_only_its_scope(
    served: InProcessDaemon, org_dir: Path
) -> None:
    async with await served.client() as client:
        huge_purpose(org_dir)
        status = await status_after_edit(client, lambda s: bool(s.over_budget))
        with pytest.raises(RpcError) as failure:
            await client.session_open("ada", "general")
        elsewhere = await client.session_open("ada", "releases")
        await client.session_send(elsewhere.session, "fine")
    assert status.config_error is None
    assert {(p.channel, p.block) for p in status.over_budget} == {("general", "purpose")}
    assert failure.value.code == 1001
    assert failure.value.data["block"] == "purpose"
