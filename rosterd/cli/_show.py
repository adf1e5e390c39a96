"""``roster server runs show``: a run's trace, explained for people.

Per compilation: every block with its status (included, shrunk, omitted,
absent, failed), counts and the reason, what a session turn left out
because the conversation already holds it, the budget arithmetic, the cache
boundaries with offsets and prefix hashes, and the route key. Then the
provider-reported usage per turn with the daemon's cache verdict (the reuse
the compiler made possible against what the provider reported), and the
run's cache-read ratio (cached input tokens over all input tokens).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import msgspec

from ..compiler import (
    ADVISORY_ORDER,
    SHRINK_RULE,
    BlockTrace,
    BoundaryCheck,
    BudgetTrace,
    ContextRecord,
    held_items,
)
from ..protocol import CacheCheck, Price, RunInfo, TranscriptEntry, Usage
from ._output import short, table, when

_HASH = 12
_BOUNDARY_LABEL = {
    "connections": "after connections",
    "purpose": "after purpose",
    "system": "end of system",
}


class TurnUsage(msgspec.Struct, frozen=True):
    """One engine call's usage (a turn's, or one ``step`` of it), ``None`` where
    the provider reported none; ``cache`` is the daemon's verdict on its reuse."""

    turn: int
    input_tokens: int | None
    cached_input_tokens: int | None
    uncached_input_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    cache: CacheCheck | None = None
    step: int = 1
    # USD, None where unknown (no usage, or a model without a price).
    cost_usd: float | None = None


class UsageSummary(msgspec.Struct, frozen=True):
    """Provider-reported token counts per turn and summed; ``cache_read_ratio``
    is cached over all input tokens, ``None`` before any usage was reported."""

    turns: list[TurnUsage]
    input_tokens: int
    cached_input_tokens: int
    uncached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cache_read_ratio: float | None
    # The sum of every call's cost; None when any call's is unknown.
    cost_usd: float | None = None
    prices: list[Price] = []


def summarise_usage(entries: Sequence[TranscriptEntry]) -> UsageSummary:
    answered = [
        e for e in entries if e.role == "assistant" and (e.usage is not None or e.cache is not None)
    ]
    turns = [
        msgspec.structs.replace(
            _turn_usage(e.turn, e.usage, e.cache),
            step=e.step,
            cost_usd=e.cost.usd if e.cost is not None else None,
        )
        for e in answered
    ]
    costs = [e.cost for e in answered]
    prices = list({c.price: None for c in costs if c is not None})
    known = [e.usage for e in entries if e.role == "assistant" and e.usage is not None]
    total_in = sum(u.input_tokens for u in known)
    cached = sum(u.cached_input_tokens for u in known)
    return UsageSummary(
        turns=turns,
        input_tokens=total_in,
        cached_input_tokens=cached,
        uncached_input_tokens=total_in - cached,
        cache_write_tokens=sum(u.cache_write_tokens for u in known),
        output_tokens=sum(u.output_tokens for u in known),
        cache_read_ratio=cached / total_in if total_in else None,
        cost_usd=None if None in costs else sum(c.usd for c in costs if c is not None),
        prices=prices,
    )


def _turn_usage(turn: int, usage: Usage | None, cache: CacheCheck | None) -> TurnUsage:
    if usage is None:
        return TurnUsage(turn, None, None, None, None, None, cache)
    return TurnUsage(
        turn=turn,
        input_tokens=usage.input_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        uncached_input_tokens=usage.input_tokens - usage.cached_input_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
        cache=cache,
    )


def render_show(
    info: RunInfo,
    records: Sequence[ContextRecord],
    transcript: Sequence[TranscriptEntry],
    usage: UsageSummary,
) -> str:
    lines = [f"run {info.id}"]
    channel = f"#{info.channel}" if info.channel else "-"
    lines.append(
        f"  surface {info.surface} · worker {info.worker} · channel {channel} · "
        f"status {info.status}"
    )
    lines.append(f"  created {when(info.created_at)} · ended {when(info.ended_at)}")
    if info.task:
        lines.append(f"  task {info.task}")
    if info.error:
        lines.append(f"  error: {info.error}")
    if info.rolled_from:
        lines.append(f"  rolled over from {info.rolled_from}: {info.rollover}")
    if info.rolled_to:
        lines.append(f"  rolled over to {info.rolled_to}: {info.rollover}")
    turns = {e.turn for e in transcript if e.role == "user"}
    lines.append(f"  {len(records)} compilation(s), {len(turns)} turn(s) sent to the engine")
    # What each block held, folded record by record (a session's records
    # say what changed since the one before).
    held: dict[str, dict[str, int]] = {}
    for number, record in enumerate(records, 1):
        for block in record.blocks:
            if block.block in ADVISORY_ORDER:
                held[block.block] = held_items(held.get(block.block), block)
        lines.append("")
        lines.extend(_compilation(number, len(records), record, held))
    lines.append("")
    lines.extend(_usage(usage))
    failures = [e for e in transcript if e.role == "error"]
    if failures:
        lines.append("")
        lines.append("engine failures")
        lines.extend(f"  turn {e.turn} at {when(e.at)}: {e.content}" for e in failures)
    return "\n".join(lines)


def _compilation(
    number: int, count: int, record: ContextRecord, held: Mapping[str, Mapping[str, int]]
) -> list[str]:
    what = {
        "system": "system part (frozen for the session)",
        "turn": f"turn {record.turn} input",
        "run": "system part and input",
        "step": f"turn {record.turn} step {record.step}: tool results",
    }[record.kind]
    status = "ok" if record.status == "ok" else "FAILED"
    lines = [f"compilation {number}/{count}: {what}, {status}, at {when(record.at)}"]
    if record.error is not None:
        e = record.error
        lines.append(
            f"  failed: block {e.block!r} is {e.size} characters, over its limit of "
            f"{e.limit}: {e.reason}"
        )
        lines.append("  no model input was produced; the engine received nothing")
    lines.append(
        f"  policy v{record.policy.version} ({record.policy.sha256[:_HASH]}) · "
        f"engine {record.engine_fingerprint[:_HASH]}"
    )
    if record.rollover is not None and record.kind == "step":
        previous = record.rollover.previous
        lines.append(f"  carried over from session {previous}: its calls were made there, once")
    elif record.rollover is not None:
        lines.append(f"  continues session {record.rollover.previous}: {record.rollover.reason}")
    if record.kind != "turn" and record.route_key is not None:
        lines.append(f"  route key {record.route_key}")
    if record.cache:
        lines.append(_stability(record.cache))
    lines.append(_blocks(record.blocks))
    if record.tools is not None and record.tools.items:
        names = ", ".join(_tool_name(line) for line in record.tools.content.splitlines())
        lines.append(
            f"  tools ({names}): {record.tools.rendered_chars} chars, "
            f"sha256 {record.tools.sha256[:_HASH]}, cached before the system text"
        )
    for note in record.notes:
        where = f"#{note.channel}" if note.channel else "worker-wide"
        lines.append(f"  memory: {note.action} note {note.note} ({where})")
    lines.extend(_memory_reasons(record.blocks))
    left_out = _already_shown(record.blocks, held)
    if left_out:
        lines.append(f"  already in the conversation, left out: {left_out}")
    if record.budget is not None:
        lines.extend(_budget(record.budget, record.blocks))
    if record.kind != "turn" and record.boundaries:
        lines.append("  cache boundaries (offsets in characters of the system text)")
        lines.append(
            table(
                ("BOUNDARY", "OFFSET", "PREFIX SHA256"),
                ((_BOUNDARY_LABEL[b.name], b.offset, b.sha256) for b in record.boundaries),
                indent="    ",
            )
        )
    return lines


class _ToolLine(msgspec.Struct):
    name: str


def _tool_name(line: str) -> str:
    return msgspec.json.decode(line, type=_ToolLine).name


def _blocks(blocks: Sequence[BlockTrace]) -> str:
    rows = [
        (
            b.block,
            b.status,
            b.raw_chars,
            b.rendered_chars,
            b.limit,
            b.items,
            b.omitted,
            b.sha256[:_HASH],
            "-" if _source_is_reason(b) else short(b.source, 40),
            _why(b),
        )
        for b in blocks
    ]
    headers = ("BLOCK", "STATUS", "RAW", "CHARS", "LIMIT", "ITEMS", "DROPPED", "SHA256")
    return table((*headers, "SOURCE", "WHY"), rows, indent="  ")


def _source_is_reason(block: BlockTrace) -> bool:
    """An absent block's source says why it is absent, unless it is a store."""
    return block.status == "absent" and not block.source.startswith("store:")


def _why(block: BlockTrace) -> str:
    match block.status:
        case "included":
            return ""
        case "shrunk":
            reason = SHRINK_RULE.get(block.block, "dropped to fit")
            return f"kept {block.items} of {block.items + block.omitted}: {reason}"
        case "omitted":
            return f"all {block.omitted} dropped: no room left in the budget"
        case "absent":
            if block.held or block.already_shown:
                return "nothing new: all in the conversation already"
            if block.source.startswith("store:"):
                return "nothing stored for this scope"
            return block.source
        case _:
            return "over its limit; see failed above"


def _memory_reasons(blocks: Sequence[BlockTrace]) -> list[str]:
    """Why each note is in the memory block, and which ones it passed over."""
    memory = next((b for b in blocks if b.block == "memory"), None)
    if memory is None or not (memory.notes or memory.passed_over):
        return []
    lines = ["  memory notes, best first (score: the message's words it holds; +borrowed)"]
    for note in memory.notes or ():
        words = [*note.terms, *(f"+{term}" for term in note.borrowed)]
        parts = [", ".join(words)] if words else []
        if note.beside is not None:
            parts.append(f"beside {note.beside}")
        why = "; ".join(parts) or "no shared words: newest of the rest"
        lines.append(f"    {note.id}  {note.score:.3f}  {short(why, 100)}")
    for passed in memory.passed_over or ():
        lines.append(f"    passed over {passed.id}: {passed.chars} chars, {passed.reason}")
    return lines


def _already_shown(blocks: Sequence[BlockTrace], held: Mapping[str, Mapping[str, int]]) -> str:
    """E.g. ``memory 18 (16 since turn 1, 2 since turn 4) · briefing 3 (since turn 1)``,
    from what *held* says each block held as of these *blocks*."""
    parts = []
    for block in blocks:
        items = held.get(block.block)
        if not items:
            continue
        since = sorted(Counter(items.values()).items())
        if len(since) == 1:
            detail = f"since turn {since[0][0]}"
        else:
            detail = ", ".join(f"{count} since turn {turn}" for turn, count in since)
        parts.append(f"{block.block} {len(items)} ({detail})")
    return " · ".join(parts)


def _budget(budget: BudgetTrace, blocks: Sequence[BlockTrace]) -> list[str]:
    def capped(block: BlockTrace) -> str:
        return f"{block.block} {block.rendered_chars}" + (
            f"/{block.limit}" if block.limit is not None else ""
        )

    # Each advisory block's share, in the order the input shows them.
    shares = [b for b in blocks if b.block in ADVISORY_ORDER]
    return [
        f"  budget: total {budget.total} - system {budget.system} - request {budget.request}"
        f" = advisory room {budget.advisory}",
        f"          {' + '.join(map(capped, shares))}"
        f" = {sum(b.rendered_chars for b in shares)} of {budget.advisory}",
        f"          used {budget.used} of {budget.total} ({budget.total - budget.used} left)",
    ]


def _usage(usage: UsageSummary) -> list[str]:
    if not usage.turns:
        return ["usage: none reported yet"]
    headers = (
        "TURN", "INPUT", "CACHED", "UNCACHED", "CACHE-WRITE", "OUTPUT", "EXPECTED", "VERDICT",
        "COST",
    )  # fmt: skip
    rows: list[tuple[object, ...]] = [
        (
            t.turn if t.step == 1 else f"{t.turn}.{t.step}",
            *(
                "-" if n is None else n
                for n in (
                    t.input_tokens,
                    t.cached_input_tokens,
                    t.uncached_input_tokens,
                    t.cache_write_tokens,
                    t.output_tokens,
                )
            ),
            t.cache.expected_tokens if t.cache else "-",
            t.cache.verdict if t.cache else "-",
            usd(t.cost_usd),
        )
        for t in usage.turns
    ]
    rows.append(
        (
            "all",
            usage.input_tokens,
            usage.cached_input_tokens,
            usage.uncached_input_tokens,
            usage.cache_write_tokens,
            usage.output_tokens,
            "",
            "",
            usd(usage.cost_usd),
        )
    )
    ratio = usage.cache_read_ratio
    summary = (
        f"cache-read ratio {ratio:.1%} ({usage.cached_input_tokens} cached of "
        f"{usage.input_tokens} input tokens)"
        if ratio is not None
        else "cache-read ratio n/a (no input tokens reported)"
    )
    explained = [
        f"  turn {t.turn}: {t.cache.verdict}: {t.cache.cause}"
        for t in usage.turns
        if t.cache is not None and t.cache.verdict not in ("hit", "unmeasured") and t.cache.cause
    ]
    # The cache lifetime each request asked for, where it changed, and why.
    lifetime = None
    for t in usage.turns:
        if t.cache is not None and t.cache.ttl is not None and t.cache.ttl != lifetime:
            lifetime = t.cache.ttl
            explained.append(f"  turn {t.turn}: cache {t.cache.ttl_reason}")
    explained += _diagnoses(usage.turns)
    return [
        "usage per turn (tokens, as the provider reported them; EXPECTED is the reuse the "
        "compiler made possible; COST in USD, unknown where the model has no price)",
        table(headers, rows, indent="  "),
        f"  {summary}",
        *explained,
        *(f"  {describe_price(price)}" for price in usage.prices),
    ]


def _diagnoses(turns: Sequence[TurnUsage]) -> list[str]:
    """The provider's own miss reasons, beside rosterd's verdicts."""
    lines = []
    diagnosed = silent = 0
    for t in turns:
        if t.cache is None or t.cache.diagnosis is None:
            continue
        diagnosed += 1
        reason, missed = t.cache.diagnosis.reason, t.cache.diagnosis.missed_tokens
        if reason is None:
            silent += 1
            continue
        line = f"  turn {t.turn}: the provider says {reason}"
        line += f" ({missed} tokens missed)" if missed is not None else ""
        if t.cache.disagrees:
            line += f"; DISAGREES with rosterd's verdict {t.cache.verdict}"
        lines.append(line)
    if diagnosed:
        lines.append(
            f"  provider cache diagnosis on {diagnosed} call(s), {silent} without a reason "
            "(pending, or nothing missed)"
        )
    return lines


def usd(amount: float | None) -> str:
    """A cost as people read it: ``$0.004215``, or ``unknown``, never 0 for unknown."""
    return "unknown" if amount is None else f"${amount:.6f}"


def describe_price(price: Price) -> str:
    """The price row a cost was computed at, its tier, and the rules that filled it in."""
    tier = "" if price.tier_above is None else f", over {price.tier_above:,} input tokens"
    text = (
        f"priced {price.model} ({price.source}{tier}), USD per million tokens: input "
        f"{price.input:g}, cached input {price.cached_input:g}, cache write "
        f"{price.cache_write_5m:g} (5m) / {price.cache_write_1h:g} (1h) / "
        f"{price.cache_write:g}, output {price.output:g}"
    )
    return text + "".join(f"; {rule}" for rule in price.rules)


def _stability(checks: Sequence[BoundaryCheck]) -> str:
    previous = next((c.previous_run for c in checks if c.previous_run), None)
    parts = []
    for check in checks:
        text = f"{_BOUNDARY_LABEL[check.name]} {check.status}"
        if check.status == "changed":
            text += f" ({check.cause}: block {check.block})"
        parts.append(text)
    against = f"run {previous}" if previous else "nothing (first compilation)"
    return f"  prefix against {against}: " + " · ".join(parts)
