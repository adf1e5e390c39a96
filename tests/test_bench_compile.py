"""The compile benchmark runs and reports its ratios (no absolute times asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_bench_compile_quick_prints_its_ratios() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "compile.py"), "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    transcript = re.search(r"^ratio transcript 1000 / 10: (\d+\.\d+) \(min\)", out, re.M)
    floor = re.search(r"^ratio compile_turn / floor: (\d+\.\d+)x \(min\)", out, re.M)
    assert transcript is not None and floor is not None, out
    assert float(transcript[1]) > 0 and float(floor[1]) > 0
    for label in ("transcript of 10 messages", "transcript of 1000 messages", "floor:"):
        assert re.search(rf"{label}.*\d+\.\d us .*\d+\.\d us", out), out
    assert "(quick)" in out
