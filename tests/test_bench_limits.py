"""The hostile-input benchmark runs against a real daemon and reports its figures."""

from __future__ import annotations

import os
import re

import pytest
from harness import run_bench

pytestmark = pytest.mark.bench


def test_bench_limits_quick_reports_memory_and_idle_connections() -> None:
    out = run_bench("limits.py", "--quick")
    assert re.search(r"^\s+50 max-size posts to one channel: RSS [+-]\d+\.\d MiB$", out, re.M), out
    assert re.search(r"^\s+20 max-size memory notes: RSS [+-]\d+\.\d MiB$", out, re.M), out
    if os.geteuid() == 0:
        assert "100 idle connections: 100 admitted" in out, out
        assert re.search(r"roster status meanwhile: 3/3 answered", out), out
    else:
        assert "idle connections of a second uid: skipped (needs root)" in out, out
