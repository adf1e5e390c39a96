"""``roster server stats cache``: cache-read share and misses by cause.

Aggregated over the state (a directory or a database) from what each turn
recorded: the provider's usage fields and the daemon's verdict on them,
never inferred from hashes after the fact.
"""

from __future__ import annotations

from collections import Counter

import msgspec

from ..protocol import StateLocation
from ._output import emit_json, table
from ._runs import state_store

__all__ = ("CacheStats", "stats_cache")


class CacheStats(msgspec.Struct, frozen=True):
    runs: int
    turns: int
    input_tokens: int
    cached_input_tokens: int
    cache_read_share: float | None
    verdicts: dict[str, int]
    misses_by_cause: dict[str, int]
    compiler_caused_misses: int


async def collect(state: StateLocation, worker: str | None, channel: str | None) -> CacheStats:
    verdicts: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    turns = input_tokens = cached = 0
    async with state_store(state) as store:
        runs = [
            info
            for info in await store.all()
            if (worker is None or info.worker == worker)
            and (channel is None or info.channel == channel)
        ]
        for info in runs:
            for entry in await store.transcript(info.id):
                if entry.role != "assistant":
                    continue
                turns += 1
                # A turn whose usage was not reported counts no tokens, not zero ones.
                if entry.usage is not None:
                    input_tokens += entry.usage.input_tokens
                    cached += entry.usage.cached_input_tokens
                if entry.cache is None:
                    continue
                verdicts[entry.cache.verdict] += 1
                if entry.cache.verdict == "prefix-changed":
                    causes[(entry.cache.cause or "changed").split(" (")[0]] += 1
                elif entry.cache.verdict in ("provider-miss", "below-minimum"):
                    causes[entry.cache.verdict] += 1
    return CacheStats(
        runs=len(runs),
        turns=turns,
        input_tokens=input_tokens,
        cached_input_tokens=cached,
        cache_read_share=cached / input_tokens if input_tokens else None,
        verdicts=dict(sorted(verdicts.items())),
        misses_by_cause=dict(sorted(causes.items())),
        compiler_caused_misses=verdicts["prefix-changed"],
    )


async def stats_cache(
    state: StateLocation, worker: str | None, channel: str | None, as_json: bool
) -> int:
    stats = await collect(state, worker, channel)
    if as_json:
        emit_json(stats)
        return 0
    share = f"{stats.cache_read_share:.1%}" if stats.cache_read_share is not None else "n/a"
    print(
        f"{stats.runs} runs, {stats.turns} answered turns: {stats.cached_input_tokens} of "
        f"{stats.input_tokens} input tokens were cache reads ({share})"
    )
    if stats.verdicts:
        print(table(("VERDICT", "TURNS"), stats.verdicts.items()))
    if stats.misses_by_cause:
        print(table(("MISS CAUSE", "TURNS"), stats.misses_by_cause.items()))
    print(f"compiler-caused misses (the prefix changed): {stats.compiler_caused_misses}")
    return 0
