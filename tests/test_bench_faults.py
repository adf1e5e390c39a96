"""The provider-faults benchmark runs two real daemons through the fault proxy
and reports its figures."""

from __future__ import annotations

import re

import pytest
from harness import run_bench

pytestmark = pytest.mark.bench


def test_bench_faults_quick_answers_every_turn_and_reports_the_added_latency() -> None:
    out = run_bench("faults.py", "--quick")
    rows = re.findall(r"^\s+(faults|clean)\s+(\d+)\s+(\d+)\s+(\d+)\s+\d+\.\d\s+\d+\.\d$", out, re.M)
    assert [(name, int(turns), int(failed)) for name, turns, failed, _ in rows] == [
        ("faults", 60, 0),
        ("clean", 60, 0),
    ], out
    assert int(rows[0][3]) > 0 and int(rows[1][3]) == 0, out
    assert re.search(r"p99 added by the faults: -?\d+\.\d{3} s", out), out
