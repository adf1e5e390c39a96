"""The cost benchmark replays three paces through a real daemon and reports
what each cache lifetime is billed."""

from __future__ import annotations

import re

import pytest
from harness import run_bench

pytestmark = pytest.mark.bench


def test_bench_cost_quick_prices_every_cadence_and_choice() -> None:
    out = run_bench("cost.py", "--quick")
    cost, ratio = r"\s+(\d+\.\d{4})", r"\s+\d+\.\d\d"
    rows = re.findall(rf"^\s+\((a|b|c)\) [a-z ]+{cost * 3}{ratio * 2}$", out, re.M)
    assert [cadence for cadence, *_ in rows] == ["a", "b", "c"], out
    assert all(float(cost) > 0 for row in rows for cost in row[1:]), out
    assert len(re.findall(r"auto / cheapest fixed: \d+\.\d\d", out)) == 3, out
    assert re.search(r"auto / fixed 5m: \d+\.\d\d \(aim: at most 0\.35\)", out), out
