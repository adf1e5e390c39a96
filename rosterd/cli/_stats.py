"""``roster server stats cache`` and ``stats cost``: cache-read share and
misses by cause; billed cost.

Aggregated over the state (a directory or a database) from what each turn
recorded: the provider's usage fields, the daemon's verdict on them and the
cost it billed them at, never inferred from hashes after the fact, and
readable whether the daemon is up or down.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import msgspec

from ..protocol import CallCost, RunInfo, StateLocation, TranscriptEntry, Usage
from ..stores import read_state_runs
from ._output import emit_json, table


class CacheStats(msgspec.Struct, frozen=True):
    runs: int
    turns: int
    input_tokens: int
    cached_input_tokens: int
    cache_read_share: float | None
    verdicts: dict[str, int]
    misses_by_cause: dict[str, int]
    compiler_caused_misses: int
    # Calls the provider diagnosed (diagnose_cache): its reasons, and how
    # many contradict the verdict rosterd reached from its own hashes.
    provider_reasons: dict[str, int] = {}
    disagreements: int = 0


async def collect(state: StateLocation, worker: str | None, channel: str | None) -> CacheStats:
    verdicts: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    turns = input_tokens = cached = disagreements = 0
    async with read_state_runs(state) as store:
        runs = [
            info
            for info in (await store.all()).runs
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
                if entry.cache.diagnosis is not None:
                    reasons[entry.cache.diagnosis.reason or "none given"] += 1
                    disagreements += entry.cache.disagrees
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
        provider_reasons=dict(sorted(reasons.items())),
        disagreements=disagreements,
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
    if stats.provider_reasons:
        print(table(("PROVIDER'S MISS REASON", "CALLS"), stats.provider_reasons.items()))
        print(
            f"provider and rosterd disagree: {stats.disagreements} "
            "(see docs/operations.md, Reading a disagreement)"
        )
    return 0


class CostRow(msgspec.Struct, frozen=True):
    """Engine calls of one group: tokens, what the priced ones cost, and how
    many had no price (their cost is unknown, never 0)."""

    group: str
    calls: int
    input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cost_usd: float
    unpriced_calls: int


class _Tally:
    """One group's sums while the calls are read."""

    def __init__(self) -> None:
        self.calls = self.input = self.cached = self.written = self.output = self.unpriced = 0
        self.usd = 0.0

    def add(self, usage: Usage, cost: CallCost | None) -> None:
        self.calls += 1
        self.input += usage.input_tokens
        self.cached += usage.cached_input_tokens
        self.written += usage.cache_write_tokens
        self.output += usage.output_tokens
        if cost is None:
            self.unpriced += 1
        else:
            self.usd += cost.usd

    def row(self, group: str) -> CostRow:
        return CostRow(
            group,
            self.calls,
            self.input,
            self.cached,
            self.written,
            self.output,
            self.usd,
            self.unpriced,
        )


def _group(by: str | None, info: RunInfo, entry: TranscriptEntry) -> str:
    match by:
        case "day":
            return datetime.fromtimestamp(entry.at, UTC).date().isoformat()
        case "worker":
            return info.worker
        case "channel":
            return info.channel or "-"
        case "model":
            return entry.cost.price.model if entry.cost is not None else "unpriced"
    return "all"


async def collect_cost(
    state: StateLocation,
    worker: str | None,
    channel: str | None,
    since: float | None,
    by: str | None,
) -> list[CostRow]:
    tallies: dict[str, _Tally] = {}
    async with read_state_runs(state) as store:
        for info in (await store.all()).runs:
            if (worker is not None and info.worker != worker) or (
                channel is not None and info.channel != channel
            ):
                continue
            for entry in await store.transcript(info.id):
                if entry.role != "assistant" or entry.usage is None:
                    continue
                if since is None or entry.at >= since:
                    tally = tallies.setdefault(_group(by, info, entry), _Tally())
                    tally.add(entry.usage, entry.cost)
    return [tally.row(group) for group, tally in sorted(tallies.items())]


async def stats_cost(
    state: StateLocation,
    worker: str | None,
    channel: str | None,
    since: float | None,
    by: str | None,
    as_json: bool,
) -> int:
    rows = await collect_cost(state, worker, channel, since, by)
    if as_json:
        emit_json(rows)
        return 0
    if not rows:
        print("no engine call reported usage")
        return 0
    headers = ((by or "").upper() or "CALLS OF", "CALLS", "INPUT", "CACHED", "WRITTEN", "OUTPUT")
    print(
        table(
            (*headers, "COST USD", "UNPRICED"),
            (
                (
                    r.group,
                    r.calls,
                    r.input_tokens,
                    r.cached_input_tokens,
                    r.cache_write_tokens,
                    r.output_tokens,
                    f"{r.cost_usd:.6f}" + (" + unknown" if r.unpriced_calls else ""),
                    r.unpriced_calls,
                )
                for r in rows
            ),
        )
    )
    return 0
