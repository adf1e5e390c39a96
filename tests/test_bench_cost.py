"""The cost benchmark replays three paces through a real daemon and reports
what each provider's cache choices are billed."""

from __future__ import annotations

import re

import pytest
from harness import run_bench

pytestmark = pytest.mark.bench


def test_bench_cost_quick_prices_every_provider_cadence_and_choice() -> None:
    out = run_bench("cost.py", "--quick")
    providers = re.split(r"^(anthropic|openai gpt-5\.6|openai gpt-5\.1)$", out, flags=re.M)
    tables = dict(zip(providers[1::2], providers[2::2], strict=True))
    assert list(tables) == ["anthropic", "openai gpt-5.6", "openai gpt-5.1"], out
    for provider, fixed in (("anthropic", 2), ("openai gpt-5.6", 2), ("openai gpt-5.1", 1)):
        ratio = r"\s+(\d+\.\d\d)"
        rows = re.findall(
            rf"^\s+\((a|b|c)\) [a-z ]+\s+(\d+\.\d{{4}}){ratio * (fixed + 2)}$",
            tables[provider],
            re.M,
        )
        assert [cadence for cadence, *_ in rows] == ["a", "b", "c"], out
        assert all(float(value) > 0 for row in rows for value in row[1:]), out
    assert re.search(r"at human pace, auto / fixed 5m: \d+\.\d\d \(aim: at most 0\.35\)", out)
