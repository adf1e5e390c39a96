"""bench/soak.py in quick mode: mixed traffic with no errors and no descriptor leak."""

from __future__ import annotations

import re

import pytest
from harness import run_bench

pytestmark = pytest.mark.bench


def test_quick_soak_reports_throughput_overhead_fds_and_rss() -> None:
    out = run_bench("soak.py", "--quick", "--rate", "30", timeout=100)
    print(out)
    requests = re.search(r"^requests: (\d+) in [\d.]+ s, ([\d.]+)/s, errors 0$", out, re.M)
    overhead = re.search(r"^overhead ms: p50 ([\d.]+) p99 ([\d.]+); session.send", out, re.M)
    fds = re.search(r"^fds: start (\d+) end (\d+) growth (-?\d+)$", out, re.M)
    rss = re.search(r"^rss KiB: start (\d+) end (\d+) growth (-?\d+) ", out, re.M)
    assert requests and overhead and fds and rss, out
    assert 0 < int(requests[1]) <= 30 * 10  # bounded by the request budget
    assert float(overhead[1]) <= float(overhead[2])
    for method in ("session.send", "memory.add", "gate.file", "task.submit"):
        assert re.search(rf"^  {re.escape(method)} +\d+ calls", out, re.M), method
    assert int(fds[3]) <= 5
    assert int(rss[3]) < 32 * 1024
    assert "daemon exit code: 0" in out
