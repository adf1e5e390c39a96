"""bench/cache.py: in quick mode, through a daemon against the simulator,
rosterd's cache reads sit at the bound and its billed input is the cheapest
that carries memory and briefing; in real-server mode it measures any
server by its usage fields (here the simulator, as if it were real)."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys

import anyio
import anyio.to_thread
import msgspec
import pytest
from harness import REPO, run_bench
from simulator import Simulator, Status

pytestmark = pytest.mark.bench

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


async def _real_mode(*args: str) -> str:
    # The bench is a subprocess; this loop keeps serving the simulator meanwhile.
    return await anyio.to_thread.run_sync(functools.partial(run_bench, "cache.py", *args))


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_real_server_mode_reports_the_servers_own_cached_share(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_SERVER_KEY", "sk-bench")
    async with Simulator(api_key="sk-bench") as server:
        url = server.openai_url if kind == "openai" else server.anthropic_url
        out = await _real_mode(
            "--engine", kind, "--base-url", url, "--model", "m-1",
            "--api-key-env", "BENCH_SERVER_KEY", "--json",
        )  # fmt: skip
        bodies = [msgspec.json.decode(body) for body in server.bodies()]
    report = json.loads(out)
    assert (report["engine"], report["base_url"], report["model"]) == (kind, url, "m-1")
    rows = report["results"]
    assert sorted(rows) == ["naive_a", "naive_b", "rosterd"]
    for name, row in rows.items():
        assert (row["failed"], row["unmeasured"]) == (0, 0), name
        assert row["turns"] > 0 and row["prompt_tokens"] > 0, name
        assert row["cached_share"] == row["cached_tokens"] / row["prompt_tokens"]
    share = {name: row["cached_share"] for name, row in rows.items()}
    # From turn 2 on a run id costs nothing more: naive (b) only loses turn 1.
    assert share["rosterd"] > share["naive_a"] and share["naive_b"] > share["naive_a"]
    assert abs(share["rosterd"] - share["naive_b"]) < 0.01
    # Over all turns the run id costs naive (b) every session's first turn.
    assert rows["rosterd"]["share_all_turns"] > rows["naive_b"]["share_all_turns"]
    # Every turn of every strategy reached the server, asking for the model given.
    shape = report["shape"]
    sent = shape["workers"] * shape["channels"] * shape["turns"]
    tasks = sum(1 for body in bodies if "summarise turn" in json.dumps(body))
    assert tasks >= 1
    assert len(bodies) == 3 * sent + tasks
    assert {body["model"] for body in bodies} == {"m-1"}


@pytest.mark.anyio
async def test_real_server_mode_counts_failed_turns() -> None:
    async with Simulator() as server:
        server.script(Status(400, "this request is refused"))
        out = await _real_mode("--engine", "openai", "--base-url", server.openai_url)
    assert re.search(r"^rosterd +\d+\.\d\d% +[\d,]+ +\d+ +0 +1 +\d+\.\d\d%$", out, re.M), out
    assert re.search(r"^naive \(a\) +\d+\.\d\d% +[\d,]+ +\d+ +0 +0 +\d+\.\d\d%$", out, re.M)
    assert "cached share of prompt tokens from turn 2 on" in out


def test_real_server_mode_needs_engine_and_base_url_together() -> None:
    done = subprocess.run(
        [sys.executable, "bench/cache.py", "--engine", "openai"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--engine and --base-url go together" in done.stderr
