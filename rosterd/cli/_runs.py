"""``roster server runs list|show|context``: read straight from the state.

Nothing here talks to the daemon, so every command works while it is down.
The state is a directory or a ``postgresql://`` URL. The files are
append-only and fsynced; a torn last line (a daemon killed mid-write) is
skipped, never repaired from here.

``runs context`` prints the exact prompts the engine received. Its text
format, for people and for scripts that want the raw bytes::

    === turn 2 system (4123 bytes) ===
    <exactly 4123 bytes of UTF-8>
    === turn 2 message 1/3 user (345 bytes) ===
    <exactly 345 bytes>
    ...
    === end of turn 2 ===

Every part is a header line, then exactly the stated number of bytes of
content, then one newline that is not part of the content. With ``--json``
it is a list of ``{turn, system, messages: [{role, content}]}`` instead.
That holds for a pipe or a file; on a terminal the content's control
characters are shown instead (``_terminal``), so the counts are of the
exact bytes, not of what is shown.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec

from ..compiler import ContextRecord
from ..protocol import (
    RunInfo,
    StateLocation,
    TranscriptEntry,
    TurnRequest,
    context_json_items,
    context_page,
)
from ..stores import read_state_runs
from ._output import Columns, emit_json, listing, when
from ._show import UsageSummary, render_show, summarise_usage


class RunReport(msgspec.Struct, frozen=True):
    info: RunInfo
    records: list[ContextRecord]
    transcript: list[TranscriptEntry]
    usage: UsageSummary


async def _report(state: StateLocation, run: str) -> RunReport:
    async with read_state_runs(state) as store:
        info = await store.info(run)
        entries = await store.transcript(run)
        records = await store.context(run)
    return RunReport(info=info, records=records, transcript=entries, usage=summarise_usage(entries))


_RUNS: Columns[RunInfo] = (
    ("RUN", lambda i: i.id),
    ("SURFACE", lambda i: i.surface),
    ("WORKER", lambda i: i.worker),
    ("CHANNEL", lambda i: f"#{i.channel}" if i.channel else "-"),
    ("STATUS", lambda i: i.status),
    ("CREATED", lambda i: when(i.created_at)),
    ("ENDED", lambda i: when(i.ended_at)),
    ("TASK", lambda i: i.task),
)


async def runs_list(state: StateLocation, as_json: bool, limit: int | None) -> int:
    async with read_state_runs(state) as store:
        infos = await store.newest(limit)
    if as_json:
        emit_json(infos)
        return 0
    # A URL may hold a password: never echoed.
    where = state if isinstance(state, Path) else "the database"
    print(listing(_RUNS, infos, f"no runs in {where}"))
    return 0


async def runs_show(state: StateLocation, run: str, as_json: bool) -> int:
    report = await _report(state, run)
    if as_json:
        emit_json(report)
    else:
        print(render_show(report.info, report.records, report.transcript, report.usage))
    return 0


def _pages(report: RunReport, every: bool) -> Iterator[list[TurnRequest]]:
    """The run's requests a page at a time, as ``runs.context`` serves them."""
    after = 0
    while True:
        page = context_page(
            report.info.id, report.records, report.transcript, every=every, after=after
        )
        yield page.turns
        if page.next is None:
            return
        after = page.next


def render_context(requests: list[TurnRequest]) -> bytes:
    out: list[bytes] = []

    def part(header: str, content: str) -> None:
        data = content.encode()
        out.append(f"=== {header} ({len(data)} bytes) ===\n".encode())
        out.append(data + b"\n")

    for request in requests:
        label = f"turn {request.turn}" + (f" step {request.step}" if request.step > 1 else "")
        if request.tools:
            part(f"{label} tools", request.tools)
        part(f"{label} system", request.system)
        count = len(request.messages)
        for number, message in enumerate(request.messages, 1):
            answers = f" for {message.call}" if message.call is not None else ""
            part(f"{label} message {number}/{count} {message.role}{answers}", message.content)
            for call in message.calls:
                part(f"{label} message {number}/{count} call {call.id} {call.name}", call.arguments)
        out.append(f"=== end of {label} ===\n".encode())
    return b"".join(out)


async def runs_export(state: StateLocation, run: str) -> int:
    """Write the run's ``context.jsonl`` to stdout, byte for byte, from either backend."""
    async with read_state_runs(state) as store:
        await store.info(run)
        data = await store.export(run)
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


async def runs_context(state: StateLocation, run: str, every: bool, as_json: bool) -> int:
    report = await _report(state, run)
    sys.stdout.flush()
    out = sys.stdout.buffer
    # Page by page, so a long session's every-turn output (quadratic in its
    # turns) is never held whole; the bytes are those of the list at once.
    separator = b"[\n"
    for requests in _pages(report, every):
        if as_json:
            out.write(separator + b",\n".join(context_json_items(requests)))
            separator = b",\n"
        else:
            out.write(render_context(requests))
    if as_json:
        out.write(b"\n]\n")
    out.flush()
    return 0
