"""The hostile-input benchmark runs against a real daemon and reports its
figures, start-up over a long history among them."""

from __future__ import annotations

import os
import re

import pytest
from harness import run_bench

pytestmark = pytest.mark.bench


def test_bench_limits_quick_reports_memory_idle_connections_and_start_up() -> None:
    out = run_bench("limits.py", "--quick")
    assert re.search(r"^\s+50 max-size posts to one channel: RSS [+-]\d+\.\d MiB$", out, re.M), out
    assert re.search(r"^\s+20 max-size memory notes: RSS [+-]\d+\.\d MiB$", out, re.M), out
    if os.geteuid() == 0:
        assert "100 idle connections: 100 admitted" in out, out
        assert re.search(r"roster status meanwhile: 3/3 answered", out), out
    else:
        assert "idle connections of a second uid: skipped (needs root)" in out, out
    for runs in ("100", "2,000"):
        assert re.search(
            rf"^start-up over +{runs} finished runs: first start \d+\.\d\d s, "
            rf"later starts \d+\.\d\d s \(median of 3\)$",
            out,
            re.M,
        ), out
    assert re.search(
        r"^ratio start-up 2,000 runs / 100 runs: first start \d+\.\d\d, later starts \d+\.\d\d$",
        out,
        re.M,
    ), out
