"""The load benchmark runs against a real daemon and reports its figures."""

from __future__ import annotations

import re

import pytest
from harness import run_bench

pytestmark = pytest.mark.bench


def test_bench_load_quick_reports_its_figures_and_a_database_beside_the_files(
    postgres_url: str,
) -> None:
    # One run with --state prints every figure of a plain run, then the backends:
    # the quick run takes seconds, so it runs once for all of them.
    out = run_bench("load.py", "--quick", "--state", postgres_url)
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+\.\d)\s+(\d+\.\d+)\s+(\d+\.\d+)$", out, re.M)
    assert [int(sessions) for sessions, *_ in rows] == [1, 10, 200], out
    assert all(float(rate) > 0 for _, _, rate, _, _ in rows)
    assert re.search(r"resident memory: \d+\.\d KiB per warm session \(200 warm\)", out), out
    assert re.search(r"late/early ratio \d+\.\d\d", out), out
    # Accumulated state: notes, gates, turn p50, ratio to empty, status p50 and max.
    grown = re.findall(
        r"^\s+(\d+)\s+(\d+)\s+\d+\.\d\d\s+(\d+\.\d\d)\s+\d+\.\d\d\s+\d+\.\d\d$", out, re.M
    )
    assert [(int(notes), int(gates)) for notes, gates, _ in grown] == [
        (0, 0),
        (10_000, 2_500),
        (100_000, 25_000),
    ], out
    assert float(grown[0][2]) == 1.0
    # Telemetry on beside off, with the ratio of their turn p50s.
    assert re.search(r"^\s+off\s+\d+\.\d\d$", out, re.M), out
    assert re.search(r"^\s+on\s+\d+\.\d\d$", out, re.M), out
    assert re.search(r"ratio turn p50 telemetry on / off: \d+\.\d\d", out), out
    backends = re.findall(
        r"^\s+(files|postgresql)\s+(\d)\s+(\d+\.\d)\s+\d+\.\d\d\s+\d+\.\d\d$", out, re.M
    )
    assert [(name, int(daemons)) for name, daemons, _ in backends] == [
        ("files", 1),
        ("postgresql", 1),
        ("postgresql", 2),
    ], out
    assert all(float(rate) > 0 for _, _, rate in backends)
