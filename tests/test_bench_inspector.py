"""The inspector benchmark renders a long run's pages and a big turn's."""

from __future__ import annotations

import re

import pytest
from harness import run_bench

pytestmark = pytest.mark.bench


def test_bench_inspector_quick_times_and_sizes_every_page() -> None:
    out = run_bench("inspector.py", "--quick")
    rows = re.findall(r"^\s*([A-Za-z0-9 ]+?)\s+(\d+\.\d)\s+(\d+\.\d)$", out, re.M)
    assert [name for name, *_ in rows] == [
        "run of 200 turns",
        "its last page of turns",
        "turn 200 of it",
        "turn of a 200 KB request",
        "runs list",
        "runs list of 1002 runs",
    ], out
    # Sizes are not timings: the page limit holds in every run.
    assert all(float(kb) < 2048 for *_, kb in rows), out
    assert "aim: every page under 150 ms and under 2048 KB" in out
