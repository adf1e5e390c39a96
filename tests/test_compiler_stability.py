"""Prefix stability between compilations, and the cache verdict on provider usage."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from harness import EXAMPLE_ORG

from rosterd.compiler import (
    BoundaryCheck,
    RunMeta,
    SystemPrompt,
    check_prefix,
    compile_system,
    prefix_state,
)
from rosterd.org import Org, Surface, load_org
from rosterd.protocol import Usage, Verdict
from rosterd.runtime import judge_cache

META = RunMeta(run="r-1", turn=0, now=0.0)


def org_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EXAMPLE_ORG, tmp_path / "org"))


def compiled(org: Org, surface: Surface = Surface.SESSION) -> SystemPrompt:
    return compile_system(org, org.scope(surface, "ada", "general"), META)


def summary(checks: Sequence[BoundaryCheck]) -> list[tuple[str, str, str | None, str | None]]:
    return [(c.name, c.status, c.block, c.cause) for c in checks]


def test_first_compilation_is_new_and_a_repeat_is_stable(tmp_path: Path) -> None:
    org = load_org(org_copy(tmp_path))
    system = compiled(org)
    assert [c.status for c in check_prefix(None, system)] == ["new", "new", "new"]
    again = check_prefix(prefix_state(system, "r-0", 1.0), compiled(org))
    assert [(c.status, c.previous_run) for c in again] == [("stable", "r-0")] * 3


def test_a_purpose_edit_keeps_the_worker_prefix(tmp_path: Path) -> None:
    root = org_copy(tmp_path)
    before = prefix_state(compiled(load_org(root)), "r-0", 1.0)
    (root / "channels" / "general" / "purpose.md").write_text("A new purpose.\n")
    assert summary(check_prefix(before, compiled(load_org(root)))) == [
        ("connections", "stable", None, None),
        ("purpose", "changed", "purpose", "purpose edited"),
        ("system", "changed", "purpose", "purpose edited"),
    ]


def test_another_surface_changes_only_the_end_of_system(tmp_path: Path) -> None:
    org = load_org(org_copy(tmp_path))
    before = prefix_state(compiled(org), "r-0", 1.0)
    assert summary(check_prefix(before, compiled(org, Surface.TASK))) == [
        ("connections", "stable", None, None),
        ("purpose", "stable", None, None),
        ("system", "changed", "scope", "surface changed"),
    ]


@pytest.mark.parametrize(
    ("old", "new", "block", "cause"),
    [
        ("open PRs only when asked", "never open PRs", "connections", "connections changed"),
        ('kind = "echo"', 'kind = "openai"\nmodel = "m"', None, "engine changed"),
    ],
)
def test_org_edits_name_their_cause(
    tmp_path: Path, old: str, new: str, block: str | None, cause: str
) -> None:
    root = org_copy(tmp_path)
    before = prefix_state(compiled(load_org(root)), "r-0", 1.0)
    toml = root / "org.toml"
    toml.write_text(toml.read_text().replace(old, new))
    checks = check_prefix(before, compiled(load_org(root)))
    assert {(c.status, c.block, c.cause) for c in checks} == {("changed", block, cause)}


def judge(reusable: int, *, measured: bool = True, changed: bool = False) -> Verdict:
    checks = (
        [BoundaryCheck("connections", "changed", "identity", "identity edited")] if changed else []
    )
    usage = Usage(input_tokens=5000, cached_input_tokens=4000)
    cache = judge_cache(
        checks, usage, reusable_tokens=reusable, min_tokens=1024, measured=measured, idle_s=30.0
    )
    return cache.verdict


def test_the_verdicts() -> None:
    assert judge(4000) == "hit"
    assert judge(4400) == "hit"  # within the provider's rounding
    assert judge(4900) == "provider-miss"
    assert judge(0) == "cold"
    assert judge(900) == "below-minimum"
    assert judge(4000, measured=False) == "unmeasured"
    assert judge(0, changed=True) == "prefix-changed"
