"""The compile benchmark runs and reports its ratios (no absolute times asserted)."""

from __future__ import annotations

import re

import pytest
from harness import run_bench

pytestmark = pytest.mark.bench


def test_bench_compile_quick_prints_its_ratios() -> None:
    out = run_bench("compile.py", "--quick", timeout=100)
    transcript = re.search(r"^ratio transcript 1000 / 10: (\d+\.\d+) \(min\)", out, re.M)
    floor = re.search(r"^ratio compile_turn / floor: (\d+\.\d+)x \(min\)", out, re.M)
    assert transcript is not None and floor is not None, out
    assert float(transcript[1]) > 0 and float(floor[1]) > 0
    for label in ("transcript of 10 messages", "transcript of 1000 messages", "floor:"):
        assert re.search(rf"{label}.*\d+\.\d us .*\d+\.\d us", out), out
    assert "(quick)" in out
