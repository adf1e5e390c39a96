"""bench/cache.py in quick mode: rosterd's cache reads sit at the bound."""

from __future__ import annotations

import json

from harness import run_bench


def test_quick_bench_puts_rosterd_at_the_bound_and_above_naive_prompts() -> None:
    out = run_bench("cache.py", "--quick", "--json", "--max-gap", "0.03", timeout=100)
    results = json.loads(out)["results"]
    assert sorted(results) == ["anthropic", "openai"]
    for kind, row in results.items():
        assert row["requests"] == 2 * 2 * 8
        assert row["rosterd"] <= row["bound"] + 1e-9, kind
        assert row["bound"] - row["rosterd"] < 0.03, kind
        assert row["rosterd"] > row["naive_b"] > row["naive_a"], kind
    # Explicit breakpoints reach the bound exactly; OpenAI's 128-token steps cost a little.
    assert results["anthropic"]["bound"] - results["anthropic"]["rosterd"] < 0.005
    assert results["anthropic"]["naive_a"] == 0.0
