"""What the inspector's pages show, read from the run store.

Every function here reads through ``RunReader`` (files or PostgreSQL, the
daemon up or down) and returns plain Structs the templates render; none of
them renders anything, so everything a page shows is data the templates
escape. Ids are checked before any lookup (``check_id``), so a hostile id
never reaches a store.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .._errors import NotFoundError, RosterError
from .._ids import check_id
from ..compiler import SYSTEM_ORDER, BlockTrace, Boundary, ContextRecord
from ..protocol import (
    CacheCheck,
    RunInfo,
    TranscriptEntry,
    TurnRequest,
    Usage,
    carried_steps,
    context_page,
    request_at_turn,
)
from ..stores import RunReader, UnreadableRun

RUNS_PER_PAGE = 50
TURNS_PER_PAGE = 200
# A run page's failed compilations at most, each with its error: past it,
# a count of the rest (each one's turn page shows it), so a run that
# failed 100,000 times draws a page no bigger than one that failed 20.
FAILED_SHOWN = 20
# Search stops after this many hits; each names its run and turn.
SEARCH_HITS = 50


class Filters(msgspec.Struct, frozen=True):
    """The runs list's filters; empty strings are no filter."""

    worker: str = ""
    channel: str = ""
    surface: str = ""
    status: str = ""
    verdict: str = ""


class TurnRow(msgspec.Struct, frozen=True):
    """One turn of a run: its engine calls' usage summed, its verdict, its cost."""

    turn: int
    at: float
    steps: int
    input_tokens: int
    cached_tokens: int
    written_tokens: int
    output_tokens: int
    verdict: str | None
    cost_usd: float | None
    priced: bool
    failed: bool

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0


class RunRow(msgspec.Struct, frozen=True):
    info: RunInfo
    turns: int
    verdicts: dict[str, int]
    cost_usd: float | None


class RunView(msgspec.Struct, frozen=True):
    info: RunInfo
    engine: str
    # The model of its priced calls, as their price rows name it.
    models: list[str]
    turns: list[TurnRow]
    shown: list[TurnRow]
    page: int
    pages: int
    totals: TurnRow | None
    # The first ``FAILED_SHOWN`` failed compilations; how many more, and the
    # turn of the last.
    failed: list[ContextRecord]
    failed_more: int
    failed_last: int


class Segment(msgspec.Struct, frozen=True):
    """A piece of the system text; ``boundary`` names the cache breakpoint
    that ends it, if one does."""

    text: str
    boundary: Boundary | None


class Message(msgspec.Struct, frozen=True):
    role: str
    content: str
    new: bool
    call: str | None = None
    calls: list[tuple[str, str, str]] = []


class Step(msgspec.Struct, frozen=True):
    step: int
    system: list[Segment]
    tools: str
    messages: list[Message]
    usage: Usage | None
    cache: CacheCheck | None
    cost_usd: float | None
    reply: str | None
    error: str | None


class Side(msgspec.Struct, frozen=True):
    """A block that changed: this run's version and the previous run's."""

    block: str
    cause: str
    previous_run: str | None
    before: str | None
    after: str | None


class TurnView(msgspec.Struct, frozen=True):
    info: RunInfo
    turn: int
    records: list[ContextRecord]
    system_blocks: list[BlockTrace]
    steps: list[Step]
    changed: list[Side]
    turns: int


class Hit(msgspec.Struct, frozen=True):
    run: str
    worker: str
    turn: int
    block: str
    excerpt: str


class RunsPage(msgspec.Struct, frozen=True):
    rows: list[RunRow]
    more: bool
    unreadable: list[UnreadableRun]


async def _newest_first(store: RunReader) -> tuple[list[RunInfo], list[UnreadableRun]]:
    """Every run that can be read, newest first, and each that cannot."""
    listed = await store.all()
    return sorted(listed.runs, key=lambda i: (-i.created_at, i.id)), listed.unreadable


async def load_runs(store: RunReader, filters: Filters, page: int) -> RunsPage:
    """A page of runs, newest first, whether there are more, and the runs
    that cannot be read (every page names them)."""
    infos, unreadable = await _newest_first(store)
    rows, more = await _page_of_runs(
        store, [i for i in infos if _matches(i, filters)], filters, page
    )
    return RunsPage(rows, more, unreadable)


async def _page_of_runs(
    store: RunReader, matching: Sequence[RunInfo], filters: Filters, page: int
) -> tuple[list[RunRow], bool]:
    start = page * RUNS_PER_PAGE
    rows: list[RunRow] = []
    if not filters.verdict:
        for info in matching[start : start + RUNS_PER_PAGE]:
            rows.append(_run_row(info, await store.transcript(info.id)))
        return rows, len(matching) > start + RUNS_PER_PAGE
    # A verdict is in the transcripts: read runs in order until the page is full.
    seen = 0
    for info in matching:
        row = _run_row(info, await store.transcript(info.id))
        if filters.verdict not in row.verdicts:
            continue
        seen += 1
        if seen > start + RUNS_PER_PAGE:
            return rows, True
        if seen > start:
            rows.append(row)
    return rows, False


def _matches(info: RunInfo, filters: Filters) -> bool:
    return (
        (not filters.worker or info.worker == filters.worker)
        and (not filters.channel or info.channel == filters.channel)
        and (not filters.surface or info.surface == filters.surface)
        and (not filters.status or info.status == filters.status)
    )


def _run_row(info: RunInfo, entries: Sequence[TranscriptEntry]) -> RunRow:
    verdicts: dict[str, int] = {}
    cost: float | None = None
    for entry in entries:
        if entry.role != "assistant":
            continue
        if entry.cache is not None:
            verdicts[entry.cache.verdict] = verdicts.get(entry.cache.verdict, 0) + 1
        if entry.cost is not None:
            cost = (cost or 0.0) + entry.cost.usd
    turns = len({e.turn for e in entries if e.role == "user"})
    return RunRow(info, turns, dict(sorted(verdicts.items())), cost)


async def load_run(store: RunReader, run: str, page: int) -> RunView:
    info = await store.info(check_id("run", run))
    entries = await store.transcript(run)
    records = await store.context(run)
    turns = _turn_rows(entries)
    pages = max(1, -(-len(turns) // TURNS_PER_PAGE))
    page = min(max(page, 0), pages - 1)
    system = next((r for r in records if r.kind in ("system", "run")), None)
    failed = [r for r in records if r.status == "failed"]
    return RunView(
        info=info,
        engine=system.engine_fingerprint if system is not None else "",
        models=sorted({e.cost.price.model for e in entries if e.cost is not None}),
        turns=turns,
        shown=turns[page * TURNS_PER_PAGE : (page + 1) * TURNS_PER_PAGE],
        page=page,
        pages=pages,
        totals=summed(0, turns) if turns else None,
        failed=failed[:FAILED_SHOWN],
        failed_more=max(0, len(failed) - FAILED_SHOWN),
        failed_last=failed[-1].turn if failed else 0,
    )


async def load_turns_after(store: RunReader, run: str, after: int) -> tuple[RunInfo, list[TurnRow]]:
    """The run and its first turns after *after*, a page of them: what an
    open run's last page polls for, read from its transcript alone."""
    info = await store.info(check_id("run", run))
    rows = _turn_rows(await store.transcript(run))
    return info, [row for row in rows if row.turn > after][:TURNS_PER_PAGE]


async def load_requests(store: RunReader, run: str, turn: int) -> list[TurnRequest]:
    """Every request of *turn*, its tool steps included, as sent."""
    await store.info(check_id("run", run))
    entries = await store.transcript(run)
    if not any(e.turn == turn and e.role == "user" for e in entries):
        raise _NoSuchTurn(run, turn)
    page = context_page(run, await store.context(run), entries, every=True, after=turn - 1, limit=1)
    return [r for r in page.turns if r.turn == turn]


def _turn_rows(entries: Sequence[TranscriptEntry]) -> list[TurnRow]:
    by_turn: dict[int, list[TranscriptEntry]] = {}
    for entry in entries:
        by_turn.setdefault(entry.turn, []).append(entry)
    rows = []
    for turn, group in sorted(by_turn.items()):
        if not any(e.role == "user" for e in group):
            continue
        # A carried reply's engine call was the session's this one continues.
        calls = [e for e in group if e.role in ("assistant", "error") and not e.carried]
        rows.append(summed(turn, [_row_of(e) for e in calls]))
    return rows


def _row_of(entry: TranscriptEntry) -> TurnRow:
    usage = entry.usage or Usage()
    return TurnRow(
        turn=entry.turn,
        at=entry.at,
        steps=1,
        input_tokens=usage.input_tokens,
        cached_tokens=usage.cached_input_tokens,
        written_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
        verdict=entry.cache.verdict if entry.cache is not None else None,
        cost_usd=entry.cost.usd if entry.cost is not None else None,
        priced=entry.cost is not None or entry.role == "error",
        failed=entry.role == "error",
    )


def summed(turn: int, rows: Sequence[TurnRow]) -> TurnRow:
    """The calls *rows* as one: tokens and cost summed, the first verdict."""
    priced = [r.cost_usd for r in rows if r.cost_usd is not None]
    return TurnRow(
        turn=turn or (rows[0].turn if rows else 0),
        at=rows[0].at if rows else 0.0,
        steps=sum(r.steps for r in rows),
        input_tokens=sum(r.input_tokens for r in rows),
        cached_tokens=sum(r.cached_tokens for r in rows),
        written_tokens=sum(r.written_tokens for r in rows),
        output_tokens=sum(r.output_tokens for r in rows),
        verdict=next((r.verdict for r in rows if r.verdict is not None), None),
        cost_usd=sum(priced) if priced else None,
        priced=all(r.priced for r in rows),
        failed=any(r.failed for r in rows),
    )


async def load_turn(store: RunReader, run: str, turn: int) -> TurnView:
    info = await store.info(check_id("run", run))
    entries = await store.transcript(run)
    records = await store.context(run)
    turns = sorted({e.turn for e in entries if e.role == "user"})
    own = [r for r in records if r.turn == turn and r.kind in ("turn", "run", "step")]
    if turn not in turns and not own:
        raise _NoSuchTurn(run, turn)
    system = _system_of(records)
    steps = _steps(records, entries, turn, turns, system) if turn in turns else []
    return TurnView(
        info=info,
        turn=turn,
        records=own,
        system_blocks=[b for b in system.blocks if b.block in SYSTEM_ORDER] if system else [],
        steps=steps,
        changed=await _changed(store, [r for r in records if r.turn in (0, turn)], system),
        turns=len(turns),
    )


def _system_of(records: Sequence[ContextRecord]) -> ContextRecord | None:
    """The run's compiled system part: a session's ``system`` record, or a
    task or direct run's ``run`` record, if its compilation succeeded."""
    return next((r for r in records if r.kind in ("system", "run") and r.status == "ok"), None)


class _NoSuchTurn(NotFoundError):
    def __init__(self, run: str, turn: int) -> None:
        super().__init__("turn", str(turn), f"run {run!r} has no turn {turn}")


def _steps(
    records: Sequence[ContextRecord],
    entries: Sequence[TranscriptEntry],
    turn: int,
    turns: Sequence[int],
    system: ContextRecord | None,
) -> list[Step]:
    earlier = [t for t in turns if t < turn]
    before = 0
    if earlier:
        last_step = max((e.step for e in entries if e.turn == earlier[-1]), default=1)
        _, previous = request_at_turn(records, entries, earlier[-1], last_step)
        before = len(previous)
    made = {e.step for e in entries if e.turn == turn and e.role != "user"} | {1}
    calls = sorted(made - {step for t, step in carried_steps(entries) if t == turn})
    steps = []
    for step in calls:
        text, messages = request_at_turn(records, entries, turn, step)
        answer = next(
            (e for e in entries if e.turn == turn and e.step == step and e.role == "assistant"),
            None,
        )
        failure = next(
            (e for e in entries if e.turn == turn and e.step == step and e.role == "error"), None
        )
        steps.append(
            Step(
                step=step,
                system=_segments(text, system.boundaries if system else ()),
                tools=system.tools.content if system and system.tools else "",
                messages=[
                    Message(
                        role=m.role,
                        content=m.content,
                        new=i >= before,
                        call=m.call,
                        calls=[(c.id, c.name, c.arguments) for c in m.calls],
                    )
                    for i, m in enumerate(messages)
                ],
                usage=answer.usage if answer else None,
                cache=answer.cache if answer else None,
                cost_usd=answer.cost.usd if answer and answer.cost else None,
                reply=answer.content if answer else None,
                error=failure.content if failure else None,
            )
        )
        before = len(messages)
    return steps


def _segments(text: str, boundaries: Sequence[Boundary]) -> list[Segment]:
    """*text* cut where its cache breakpoints are; coinciding ones merge."""
    cuts: dict[int, Boundary] = {}
    for boundary in boundaries:
        if 0 < boundary.offset <= len(text):
            cuts[boundary.offset] = boundary
    segments = []
    start = 0
    for offset in sorted(cuts):
        segments.append(Segment(text[start:offset], cuts[offset]))
        start = offset
    if start < len(text) or not segments:
        segments.append(Segment(text[start:], None))
    return segments


async def _changed(
    store: RunReader, records: Sequence[ContextRecord], system: ContextRecord | None
) -> list[Side]:
    """Each boundary that changed since the previous compilation of the
    same worker and channel, with the first changed block in both versions."""
    sides = []
    seen: set[tuple[str, str | None]] = set()
    for record in records:
        for check in record.cache:
            # Every boundary after the first changed block changed with it.
            if check.status != "changed" or check.block is None:
                continue
            if (check.block, check.previous_run) in seen:
                continue
            seen.add((check.block, check.previous_run))
            before = None
            if check.previous_run is not None:
                before = await _block_of(store, check.previous_run, check.block)
            blocks = system.blocks if system is not None else ()
            after = next((b.content for b in blocks if b.block == check.block), None)
            sides.append(Side(check.block, check.cause or "", check.previous_run, before, after))
    return sides


async def _block_of(store: RunReader, run: str, block: str) -> str | None:
    """*block*'s content in *run*'s system part, if it can be read."""
    try:
        records = await store.context(check_id("run", run))
    except RosterError:
        return None
    system = _system_of(records)
    if system is None:
        return None
    return next((b.content for b in system.blocks if b.block == block), None)


async def search(store: RunReader, text: str) -> tuple[list[Hit], list[UnreadableRun]]:
    """Where *text* was shown to a worker: run, turn and block, newest run
    first; and the runs that cannot be read, so not searched."""
    if not text:
        return [], []
    infos, unreadable = await _newest_first(store)
    return await _hits(store, infos, text), unreadable


async def _hits(store: RunReader, infos: Sequence[RunInfo], text: str) -> list[Hit]:
    hits: list[Hit] = []
    for info in infos:
        for record in await store.context(info.id):
            for block in record.blocks:
                at = block.content.find(text)
                if at < 0:
                    continue
                excerpt = block.content[max(0, at - 80) : at + len(text) + 80]
                hits.append(Hit(info.id, info.worker, record.turn, block.block, excerpt))
                if len(hits) >= SEARCH_HITS:
                    return hits
    return hits
