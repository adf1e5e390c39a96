"""``roster check``: the pre-deploy gate over a real org directory."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from harness import set_daemon

from rosterd.cli import main


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def test_example_org_passes_with_a_budget_table(
    example_org: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _check(capsys, "--org", str(example_org))
    assert (code, err) == (0, [])
    lines = out.splitlines()
    assert lines[0] == f"org {example_org}: 8 compilations (chars, size/limit)"
    header = lines[1].split()
    assert header[:3] == ["WORKER", "CHANNEL", "SURFACE"]
    assert "IDENTITY" in header and "USED/TOTAL" in header
    rows = [line.split() for line in lines[2:-1]]
    assert sorted((r[0], r[1], r[2]) for r in rows) == [
        ("ada", "#general", "session"),
        ("ada", "#general", "task"),
        ("ada", "#releases", "session"),
        ("ada", "#releases", "task"),
        ("ada", "-", "direct"),
        ("grace", "#general", "session"),
        ("grace", "#general", "task"),
        ("grace", "-", "direct"),
    ]
    identity = header.index("IDENTITY")
    ada_identity = len((example_org / "workers/ada/identity.md").read_text())
    for row in rows:
        assert row[-1] == "ok"
        assert row[identity].endswith("/12000")
        assert row[header.index("USED/TOTAL")].endswith("/48000")
    # The size shown is the rendered block: the file plus its tags.
    ada = next(r for r in rows if r[0] == "ada")
    assert int(ada[identity].split("/")[0]) > ada_identity
    assert lines[-1] == "ok: every compilation fits its budgets"


def test_json_report_lists_every_block_against_its_limit(
    example_org: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _check(capsys, "--org", str(example_org), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["ok"] is True and report["problems"] == []
    direct = next(r for r in report["runs"] if r["worker"] == "grace" and r["surface"] == "direct")
    blocks = {b["block"]: b for b in direct["blocks"]}
    assert blocks["identity"]["limit"] == 12000
    assert blocks["purpose"]["status"] == "absent"
    assert blocks["message"]["status"] == "included"
    assert direct["used"] == sum(b["chars"] for b in direct["blocks"])


def test_oversized_purpose_fails_once_naming_every_compilation(
    org_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (org_dir / "channels/general/purpose.md").write_text("p" * 8100 + "\n")
    code, out, err = _check(capsys, "--org", str(org_dir))
    assert code == 1
    assert err == [
        "roster: channels/general/purpose.md: block 'purpose' is 8122 characters, over its "
        "limit of 8000: purpose.md is inserted whole or not at all "
        "[ada session #general, ada task #general, grace session #general, grace task #general]"
    ]
    failed = [line for line in out.splitlines() if line.endswith("FAILED")]
    assert len(failed) == 4
    assert all("8122/8000 OVER" in line for line in failed)
    # The other channel and the direct runs still compile.
    assert sum(line.endswith(" ok") for line in out.splitlines()) == 4


def test_oversized_identity_against_a_worker_override(
    org_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = org_dir / "org.toml"
    toml.write_text(toml.read_text() + "\n[workers.grace.context]\nidentity = 100\n")
    code, _, err = _check(capsys, "--org", str(org_dir))
    assert code == 1
    assert len(err) == 1
    assert err[0].startswith("roster: workers/grace/identity.md: block 'identity' is ")
    assert "over its limit of 100" in err[0]
    assert err[0].endswith("[grace session #general, grace task #general, grace direct]")


def set_context(org: Path, table: str, settings: str) -> None:
    """Add *settings* (TOML lines) to the example org's *table* (``[context]``
    or a worker's ``[workers.<name>.context]``, made if it has none)."""
    toml = org / "org.toml"
    head, found, rest = toml.read_text().partition(f"[{table}]\n")
    found = found or f"\n[{table}]\n"
    toml.write_text(f"{head}{found}{settings.strip()}\n{rest}")


def test_a_task_budget_is_checked_against_the_smallest_request_not_a_sample_message(
    org_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Room for a short message, but not for the dry run's own sample one:
    # the org is fine, and the check says so.
    set_context(org_dir, "context", "task = 100")
    code, out, err = _check(capsys, "--org", str(org_dir))
    assert (code, err) == (0, []), out
    request = out.splitlines()[1].split().index("REQUEST")
    sizes = {row.split()[request] for row in out.splitlines()[2:-1]}
    assert all(size.endswith("/100") for size in sizes) and len(sizes) == 2


def test_a_task_budget_no_request_fits_names_the_budget(
    org_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    set_context(org_dir, "context", "task = 5")
    set_context(org_dir, "workers.grace.context", "task = 6")
    code, out, err = _check(capsys, "--org", str(org_dir))
    assert code == 1
    assert sum(line.endswith("FAILED") for line in out.splitlines()) == 8
    empty = ": its envelope alone, with no text: no {} fits [{}]"
    assert [re.sub(r"\d+ characters", "N characters", line) for line in err] == [
        "roster: context.task: block 'message' is N characters, over its limit of 5"
        + empty.format("message", "ada session #general, ada session #releases, ada direct"),
        "roster: context.task: block 'task' is N characters, over its limit of 5"
        + empty.format("task", "ada task #general, ada task #releases"),
        "roster: workers.grace.context.task: block 'message' is N characters, over its limit of 6"
        + empty.format("message", "grace session #general, grace direct"),
        "roster: workers.grace.context.task: block 'task' is N characters, over its limit of 6"
        + empty.format("task", "grace task #general"),
    ]


def test_a_total_only_the_system_part_fits_names_the_total(
    org_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = _check(capsys, "--org", str(org_dir), "--json")
    run = next(
        r for r in json.loads(out)["runs"] if r["worker"] == "grace" and r["surface"] == "direct"
    )
    request = next(b["chars"] for b in run["blocks"] if b["block"] == "message")
    system = run["used"] - request
    set_context(org_dir, "workers.grace.context", f"total = {system + 1}")
    code, _, err = _check(capsys, "--org", str(org_dir))
    assert code == 1
    assert (
        f"roster: workers.grace.context.total: block 'message' is {request} characters, over its "
        f"limit of 1: the system part takes {system} of the total {system + 1} [grace direct]"
    ) in err


def test_missing_identity_fails_with_the_file(
    org_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (org_dir / "workers/grace/identity.md").unlink()
    code, out, err = _check(capsys, "--org", str(org_dir))
    assert code == 1
    path = (org_dir / "workers/grace/identity.md").resolve()
    assert err == [f"roster: {path}: file is missing"]
    assert out == f"org {org_dir}: cannot be loaded\n"


def test_bad_toml_fails_with_one_line(org_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (org_dir / "org.toml").write_text("[workers.ada\n")
    code, _, err = _check(capsys, "--org", str(org_dir))
    assert code == 1
    assert len(err) == 1
    assert err[0].startswith(f"roster: {(org_dir / 'org.toml').resolve()}: invalid TOML: ")


def test_toml_nested_too_deeply_fails_with_one_line(
    org_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (org_dir / "org.toml").write_text(f"x = {'[' * 100_000}{']' * 100_000}\n")
    code, _, err = _check(capsys, "--org", str(org_dir))
    assert code == 1
    assert err == [
        f"roster: {(org_dir / 'org.toml').resolve()}: invalid TOML: "
        "arrays or tables nested too deeply"
    ]


def test_unknown_key_names_the_key(org_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = org_dir / "org.toml"
    toml.write_text(toml.read_text().replace("total = 48000", "totl = 48000"))
    code, _, err = _check(capsys, "--org", str(org_dir))
    assert code == 1
    assert len(err) == 1 and "totl" in err[0]


def test_a_worker_count_past_its_bound_names_the_key(
    org_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A typo for 4: without a bound it would start four million task workers.
    set_daemon(org_dir, "task_workers = 4000000")
    code, _, err = _check(capsys, "--org", str(org_dir))
    assert code == 1
    assert err == [
        f"roster: {(org_dir / 'org.toml').resolve()}: `daemon.task_workers`: Expected `int` <= 1024"
    ]


def test_org_from_the_environment_and_usage_error_without_one(
    example_org: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ROSTER_ORG", raising=False)
    code, out, err = _check(capsys)
    assert (code, out) == (2, "")
    assert err == ["roster: no org directory: pass --org DIR or set ROSTER_ORG"]
    monkeypatch.setenv("ROSTER_ORG", str(example_org))
    code, _, err = _check(capsys)
    assert (code, err) == (0, [])
