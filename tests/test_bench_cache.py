"""bench/cache.py in quick mode: rosterd's cache reads sit at the bound, and
its billed input is the cheapest that carries memory and briefing."""

from __future__ import annotations

import json

from harness import run_bench

CARRIERS = ("rosterd", "naive_a", "naive_b")


def test_quick_bench_puts_rosterd_at_the_bound_and_above_naive_prompts() -> None:
    out = run_bench(
        "cache.py", "--quick", "--json", "--max-gap", "0.03", "--max-overhead", "0.15", timeout=100
    )
    results = json.loads(out)["results"]
    assert sorted(results) == ["anthropic", "openai"]
    for kind, row in results.items():
        assert row["requests"] == 2 * 2 * 8
        assert row["rosterd"] <= row["bound"] + 1e-9, kind
        assert row["bound"] - row["rosterd"] < 0.03, kind
        assert row["rosterd"] > row["naive_b"] > row["naive_a"], kind
        costs = {s: row[f"cost_{s}"] for s in CARRIERS}
        assert min(costs, key=costs.__getitem__) == "rosterd", (kind, costs)
        assert row["cost_message_only"] < row["cost_rosterd"] <= 1.15 * row["cost_message_only"]
    # Explicit breakpoints reach the bound exactly; OpenAI's 128-token steps cost a little.
    assert results["anthropic"]["bound"] - results["anthropic"]["rosterd"] < 0.005
    assert results["anthropic"]["naive_a"] == 0.0
