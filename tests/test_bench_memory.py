"""The memory benchmark asks its questions through a real daemon and reads
the blocks back; the cases generated to test one property each all hold."""

from __future__ import annotations

import re

import pytest
from harness import run_bench

pytestmark = pytest.mark.bench


# As long as the run it waits for may take: ~100 s alone, more beside the suite.
@pytest.mark.timeout(300)
def test_bench_memory_quick_reports_every_figure_and_the_generated_cases_hold() -> None:
    out = run_bench("memory.py", "--quick", timeout=300.0)
    rows = {
        name.strip(): numbers.split()
        for name, numbers in re.findall(
            r"^(LongMemEval_S subset \(dev\)|generated cases)\s+(.*)$", out, re.M
        )
    }
    # Through the daemon, then R@k in process: the blocks agree.
    through, in_process = re.split(r"^ranking itself.*$", out, flags=re.M)[:2]
    for data in ("LongMemEval_S subset (dev)", "generated cases"):
        assert data in through and data in in_process, out
        block = re.search(rf"^{re.escape(data)}\s+\d+\s+\d+\s+(\d+\.\d)", through, re.M)
        again = re.search(rf"^{re.escape(data)}\s+\d+\s+\d+\s+(\d+\.\d)", in_process, re.M)
        assert block is not None and again is not None and block[1] == again[1], out
    # Paraphrases, near-duplicates, long notes among short, several channels.
    assert rows["generated cases"][2:3] == ["100.0"], out
    assert re.search(r"^ +100000 +\d+\.\d{3} +\d+\.\d\d$", out, re.M), out
