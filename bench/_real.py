"""``bench/cache.py --engine KIND --base-url URL``: caching on a real server.

A bounded version of the workload (2 workers x 2 channels x 6 turns, a task,
an identity edit) goes through a real daemon whose engine is that server;
then the two naive strategies are replayed on the same conversation against
the same server. Everything reported comes from the server's own usage
fields: the cached share of prompt tokens over each session's turns from
turn 2 on (turn 1 has nothing to reuse), and the turns that failed. The
strategies run one after another, rosterd first, so a naive one may find
prefixes rosterd left in the server's cache, never the other way round.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import anyio
from _daemon import serve
from _replay import NAIVE, replay
from _workload import Recording, Shape, Turn, run_workload
from simulator import write_org

from rosterd.engines import open_engine
from rosterd.org import EngineConfig
from rosterd.protocol import Usage

__all__ = ("Measured", "add_real_arguments", "measure", "run_real", "table")

SHAPE = Shape(workers=2, channels=2, turns=6)
MAX_TOKENS = 128
TIMEOUT_S = 300.0
LABELS = {"rosterd": "rosterd", "naive_a": "naive (a)", "naive_b": "naive (b)"}


@dataclass(frozen=True)
class Measured:
    """One strategy's turns 2 on, from the server's usage fields."""

    prompt_tokens: int
    cached_tokens: int
    turns: int
    unmeasured: int
    failed: int
    # Over every turn, turn 1 included: what reuse across sessions adds.
    share_all_turns: float

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def add_real_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("real server")
    group.add_argument("--engine", choices=["openai", "anthropic"], help="the server's API")
    group.add_argument(
        "--base-url", help="the server: with /v1 for openai, without it for anthropic"
    )
    group.add_argument("--model", default="default", help="model name to ask for")
    group.add_argument("--api-key-env", help="name of the variable holding the API key")


def run_real(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.engine is None or args.base_url is None:
        parser.error("--engine and --base-url go together")
    if args.api_key_env is not None and not os.environ.get(args.api_key_env):
        parser.error(f"--api-key-env names ${args.api_key_env}, which is not set or empty")
    config = EngineConfig(
        kind=args.engine,
        model=args.model,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        max_tokens=MAX_TOKENS,
        timeout_s=TIMEOUT_S,
    )
    results = anyio.run(measure, config)
    if args.json:
        rows = {name: {**asdict(m), "cached_share": m.cached_share} for name, m in results.items()}
        where = {"engine": config.kind, "base_url": config.base_url, "model": config.model}
        print(json.dumps({**where, "shape": asdict(SHAPE), "results": rows}, sort_keys=True))
    else:
        print(table(config, results))
    return 0


def _engine_toml(config: EngineConfig) -> str:
    lines = [
        f'kind = "{config.kind}"',
        f"model = {json.dumps(config.model)}",
        f"base_url = {json.dumps(config.base_url)}",
        f"max_tokens = {config.max_tokens}",
        f"timeout_s = {config.timeout_s}",
    ]
    if config.api_key_env is not None:
        lines.append(f'api_key_env = "{config.api_key_env}"')
    return "\n".join(lines)


async def measure(config: EngineConfig) -> dict[str, Measured]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        org = root / "org"
        write_org(org, workers=SHAPE.workers, channels=SHAPE.channels, engine=_engine_toml(config))
        socket = root / "rosterd.sock"
        async with serve(org, root / "state", socket):
            recording = await run_workload(socket, org, SHAPE)
        later = [i for i, t in enumerate(recording.turns) if t.turn >= 2]
        results = {"rosterd": _rosterd(recording, later)}
        engine = open_engine(config, os.environ)
        try:
            for strategy in NAIVE:
                replayed = await replay(strategy, recording, org, engine)
                results[strategy] = _summed(replayed.usages, later, failed=replayed.failed)
        finally:
            await engine.aclose()
    return results


def _rosterd(recording: Recording, later: list[int]) -> Measured:
    turns: Sequence[Turn] = recording.turns
    failed = sum(t.failed for t in turns)
    return _summed([t.usage for t in turns], later, failed=failed)


def _summed(usages: list[Usage | None], later: list[int], *, failed: int) -> Measured:
    """*usages* per turn of the recording; the figures are over the *later* ones."""
    counted = [usages[i] for i in later]
    known = [u for u in counted if u is not None]
    every = [u for u in usages if u is not None]
    prompt_all = sum(u.input_tokens for u in every)
    return Measured(
        prompt_tokens=sum(u.input_tokens for u in known),
        cached_tokens=sum(u.cached_input_tokens for u in known),
        turns=len(counted),
        unmeasured=len(counted) - len(known),
        failed=failed,
        share_all_turns=sum(u.cached_input_tokens for u in every) / prompt_all
        if prompt_all
        else 0.0,
    )


def table(config: EngineConfig, results: dict[str, Measured]) -> str:
    shape = SHAPE
    lines = [
        f"{config.kind} server at {config.base_url} (model {config.model}): "
        f"{shape.workers} workers x {shape.channels} channels x {shape.turns} turns "
        "through the daemon, naive strategies replayed on the same conversation",
        "cached share of prompt tokens from turn 2 on, by the server's usage fields",
        "(turn 1 of a session has nothing of its own to reuse; 'all turns' adds it)",
        f"{'strategy':<10} {'cached':>8} {'prompt tokens':>14} {'turns':>6} "
        f"{'unmeasured':>11} {'failed turns':>13} {'all turns':>10}",
    ]
    for name, m in results.items():
        lines.append(
            f"{LABELS[name]:<10} {m.cached_share:>8.2%} {m.prompt_tokens:>14,} {m.turns:>6} "
            f"{m.unmeasured:>11} {m.failed:>13} {m.share_all_turns:>10.2%}"
        )
    return "\n".join(lines)
