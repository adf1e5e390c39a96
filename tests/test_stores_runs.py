"""The run store contract on both backends, and what only the database adds.

``runs`` yields a ``RunStore`` of each backend over an empty state; every
contract test runs on both with the same assertions. The PostgreSQL tests
after them check byte-identical traces against the file backend, two hosts
continuing one run, and errors that name the database without its password.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import msgspec
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres import waiting_on_locks
from psycopg_pool import AsyncConnectionPool

from rosterd import InvalidIdError, NotFoundError, StaleError, StorageError
from rosterd.compiler import ContextRecord, RunMeta, compile_system
from rosterd.org import Surface, load_org
from rosterd.protocol import RunInfo, TranscriptEntry, compiled_system
from rosterd.stores import Posts, RunStore, SessionState, State
from rosterd.stores.files import FileRuns
from rosterd.stores.postgres import PostgresState
from rosterd.stores.postgres._db import Database
from rosterd.stores.postgres._runs import (
    OPEN_RUNS,
    UNREACHED_SESSIONS,
    PostgresRun,
    PostgresRuns,
)
from rosterd.stores.postgres._state import redact

EXAMPLE_ORG = Path(__file__).resolve().parent.parent / "examples" / "org"
NOW = 1_780_000_000.0
ODD = 'NUL \x00, U+2028 \u2028, U+2029 \u2029, emoji 😀👩‍💻, é, 中文, \x1f, \x7f, "quote" \\ </s>'


@asynccontextmanager
async def postgres_runs(url: str) -> AsyncIterator[PostgresRuns]:
    """The run store of one host on the database at *url*."""
    async with PostgresState(url) as state:
        yield state.runs


@pytest.fixture
def runs(state: State) -> RunStore:
    """The run store of each backend (the ``state`` fixture's)."""
    return state.runs


def session_info(run: str, at: float = NOW) -> RunInfo:
    return RunInfo(id=run, surface="session", worker="ada", channel="general", created_at=at)


def system_record(run: str, *, turn: int = 0) -> tuple[ContextRecord, SessionState]:
    """A real compiled session opening from the example org."""
    org = load_org(EXAMPLE_ORG)
    scope = org.scope(Surface.SESSION, "ada", "general")
    system = compile_system(org, scope, RunMeta(run=run, turn=turn, now=NOW))
    state = SessionState(system=system, engine=org.engine_for("ada"))
    return system.record(RunMeta(run=run, turn=turn, now=NOW)), state


def with_content(record: ContextRecord, turn: int, content: str) -> ContextRecord:
    block = msgspec.structs.replace(record.blocks[0], content=content)
    return msgspec.structs.replace(
        record, kind="turn", turn=turn, blocks=(block, *record.blocks[1:])
    )


def entry(turn: int, role: str, content: str) -> TranscriptEntry:
    return msgspec.convert(
        {"turn": turn, "role": role, "content": content, "at": NOW + turn}, TranscriptEntry
    )


def lines(records: list[ContextRecord]) -> bytes:
    return b"".join(msgspec.json.encode(record) + b"\n" for record in records)


# The contract, on both backends.


@pytest.mark.anyio
async def test_create_writes_info_that_info_and_all_read_oldest_first(runs: RunStore) -> None:
    assert (await runs.all()).runs == []
    late = await runs.create(session_info("s-late", NOW + 5))
    early = await runs.create(session_info("s-early", NOW))
    tie_b = await runs.create(session_info("s-tie-b", NOW + 2))
    tie_a = await runs.create(session_info("s-tie-a", NOW + 2))
    assert late.last_turn == early.last_turn == 0
    assert await runs.info("s-late") == late.info
    assert [i.id for i in (await runs.all()).runs] == ["s-early", "s-tie-a", "s-tie-b", "s-late"]
    assert [tie_a.info, tie_b.info] == (await runs.all()).runs[1:3]
    for run in (late, early, tie_a, tie_b):
        await run.aclose()


async def spoil_info(runs: RunStore, run: str, request: pytest.FixtureRequest) -> None:
    """Make *run*'s info unreadable, as only a hand edit can."""
    if isinstance(runs, FileRuns):
        (runs.path(run) / "run.json").write_text("")
    else:
        url = request.getfixturevalue("postgres_url")
        async with await psycopg.AsyncConnection.connect(url) as conn:
            await conn.execute("UPDATE runs SET record = '{\"id\": 3}' WHERE id = %s", (run,))


@pytest.mark.anyio
async def test_a_run_whose_info_cannot_be_read_is_named_and_the_others_still_listed(
    runs: RunStore, request: pytest.FixtureRequest
) -> None:
    for run in ("s-good", "s-bad"):
        await (await runs.create(session_info(run))).aclose()
    await spoil_info(runs, "s-bad", request)
    listed = await runs.all()
    assert [i.id for i in listed.runs] == ["s-good"]
    assert [u.run for u in listed.unreadable] == ["s-bad"]
    assert "unreadable" in listed.unreadable[0].reason
    with pytest.raises(StorageError):
        await runs.info("s-bad")


@pytest.mark.anyio
async def test_the_newest_runs_page_as_all_lists_them_ties_by_id_in_code_point_order(
    runs: RunStore, request: pytest.FixtureRequest
) -> None:
    # Ties in time, and ids a collation other than code points would order
    # otherwise ("s-B" before "s-a"); one run that cannot be read.
    ids = ["s-a", "s-B", "s-b.2", "s-b-1", "s-0", "s-Z", "s-bad", "s-late"]
    times = [NOW, NOW, NOW + 1, NOW + 1, NOW + 1, NOW + 2, NOW + 2, NOW + 3]
    for run, at in zip(ids, times, strict=True):
        await (await runs.create(session_info(run, at))).aclose()
    await spoil_info(runs, "s-bad", request)
    listed = [i.id for i in (await runs.all()).runs]
    assert listed == ["s-B", "s-a", "s-0", "s-b-1", "s-b.2", "s-Z", "s-late"]
    for limit in (1, 2, 3, 7, 50):
        for before in (None, *listed):
            end = len(listed) if before is None else listed.index(before)
            page = [i.id for i in await runs.newest(limit, before)]
            assert page == listed[max(0, end - limit) : end], (limit, before)
    assert [i.id for i in await runs.newest(None, "s-b.2")] == listed[:4]
    assert [i.id for i in await runs.newest(None)] == listed
    # Unknown, or not among the runs listed: not found.
    for before in ("s-nobody", "s-bad"):
        with pytest.raises(NotFoundError):
            await runs.newest(2, before)


@pytest.mark.anyio
async def test_unknown_runs_are_not_found_and_bad_ids_invalid(runs: RunStore) -> None:
    with pytest.raises(NotFoundError) as raised:
        await runs.info("s-nobody")
    assert (raised.value.kind, raised.value.name) == ("run", "s-nobody")
    assert await runs.context("s-nobody") == []
    assert await runs.transcript("s-nobody") == []
    assert await runs.load_session("s-nobody") is None
    for bad in ("../etc", "", ".hidden", "a/b"):
        with pytest.raises(InvalidIdError):
            await runs.info(bad)
    with pytest.raises(InvalidIdError):
        await runs.session_for("ada", "../general")


@pytest.mark.anyio
async def test_new_ids_carry_prefix_and_utc_stamp_and_differ(runs: RunStore) -> None:
    ids = {runs.new_id("task", 0.0) for _ in range(20)}
    assert len(ids) == 20
    for run in ids:
        head, stamp_date, stamp_time, tail = run.split("-")
        assert (head, stamp_date, stamp_time) == ("task", "19700101", "000000")
        assert len(tail) == 6 and int(tail, 16) >= 0


@pytest.mark.anyio
async def test_trace_and_transcript_read_back_in_append_order(runs: RunStore) -> None:
    record, _ = system_record("s-1")
    run = await runs.create(session_info("s-1"))
    traced = [record, with_content(record, 1, "one"), with_content(record, 2, ODD)]
    for item in traced:
        await run.trace(item)
    entries = [entry(1, "user", "hi"), entry(1, "assistant", ODD), entry(2, "user", "again")]
    await run.record(entries[0])
    await run.record_many(entries[1:])
    await run.record_many([])
    assert await runs.context("s-1") == traced
    assert await runs.transcript("s-1") == entries
    await run.aclose()


@pytest.mark.anyio
async def test_the_head_of_a_trace_is_read_up_to_the_record_asked_for(runs: RunStore) -> None:
    record, _ = system_record("s-1")
    run = await runs.create(session_info("s-1"))
    # More turns than the database reads at a time: the head stops at the
    # record asked for, or reads them all when none is.
    traced = [record, *(with_content(record, turn, f"turn {turn}") for turn in range(1, 21))]
    for item in traced:
        await run.trace(item)
    await run.aclose()
    assert await runs.context_until("s-1", compiled_system) == traced[:1]
    assert await runs.context_until("s-1", lambda r: r.turn == 12) == traced[:13]
    assert await runs.context_until("s-1", lambda r: False) == traced
    assert await runs.context_until("s-nobody", compiled_system) == []


@pytest.mark.anyio
async def test_the_head_of_a_trace_leaves_out_a_torn_tail_and_reads_around_a_bad_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = FileRuns(tmp_path / "state")
    await (await files.create(session_info("s-1"))).aclose()
    record, _ = system_record("s-1")
    whole = lines([with_content(record, 3, "three")])
    trace = tmp_path / "state" / "runs" / "s-1" / "context.jsonl"
    # A record, a hand edit, a whole record after it, and a kill's half line.
    first = lines([with_content(record, 1, "one")])
    trace.write_bytes(first + b"{not json}\n" + whole + whole[:40])
    got = await files.context_until("s-1", lambda r: False)
    assert [r.turn for r in got] == [1, 3]
    assert "skipped an unreadable line" in caplog.text
    # Only read, never repaired: the daemon's start cuts a torn tail.
    assert trace.read_bytes().endswith(whole[:40])


@pytest.mark.anyio
async def test_reopen_gives_transcript_and_highest_traced_turn(runs: RunStore) -> None:
    record, _ = system_record("s-1")
    run = await runs.create(session_info("s-1"))
    await run.trace(record)
    await run.trace(with_content(record, 1, "one"))
    # Turn 2's compilation failed: traced, never sent, so not in the transcript.
    failed = msgspec.structs.replace(with_content(record, 2, "too long"), status="failed")
    await run.trace(failed)
    await run.record_many([entry(1, "user", "hi"), entry(1, "assistant", "hello")])
    await run.aclose()

    again, transcript = await runs.reopen(await runs.info("s-1"))
    assert again.last_turn == 2
    assert transcript == [entry(1, "user", "hi"), entry(1, "assistant", "hello")]
    await again.record(entry(3, "user", "on"))
    assert [e.turn for e in await runs.transcript("s-1")] == [1, 1, 3]
    await again.aclose()


@pytest.mark.anyio
async def test_entries_of_a_turn_never_traced_are_cut_when_the_run_reopens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = FileRuns(tmp_path / "state")
    record, _ = system_record("s-1")
    run = await files.create(session_info("s-1"))
    await run.append(with_content(record, 1, "one"), [entry(1, "user", "one")])
    await run.record(entry(1, "assistant", "1"))
    assert run.last_turn == 1
    await run.aclose()
    transcript = tmp_path / "state" / "runs" / "s-1" / "transcript.jsonl"
    whole = transcript.read_bytes()
    # A kill between the two fsyncs of turn 2's first write: its user turn
    # landed, its trace did not, so no engine saw it.
    with transcript.open("ab") as handle:
        handle.write(msgspec.json.encode(entry(2, "user", "two")) + b"\n")

    run, entries = await files.reopen(session_info("s-1"))
    assert [(e.turn, e.content) for e in entries] == [(1, "one"), (1, "1")]
    assert run.last_turn == 1
    assert transcript.read_bytes() == whole
    assert "dropped 1 entries of a turn never traced" in caplog.text
    await run.append(with_content(record, 2, "again"), [entry(2, "user", "again")])
    await run.aclose()
    assert [e.content for e in await files.transcript("s-1")] == ["one", "1", "again"]


@pytest.mark.anyio
async def test_finish_and_end_write_the_final_info(runs: RunStore) -> None:
    run = await runs.create(session_info("s-1"))
    await run.finish("failed", NOW + 9, error="over budget")
    assert run.info.status == "failed"
    assert await runs.info("s-1") == msgspec.structs.replace(
        session_info("s-1"), status="failed", ended_at=NOW + 9, error="over budget"
    )
    other = await runs.create(session_info("s-2"))
    final = msgspec.structs.replace(other.info, status="done", ended_at=NOW + 1, rolled_to="s-3")
    await other.end(final)
    assert await runs.info("s-2") == final
    await runs.write_info(msgspec.structs.replace(final, rollover="bound"))
    assert (await runs.info("s-2")).rollover == "bound"


@pytest.mark.anyio
async def test_a_warm_turns_writes_hold_the_lease_until_it_concludes(state: State) -> None:
    info = session_info("s-1")
    run = await state.runs.create(info)
    record, _ = system_record("s-1", turn=1)
    # What the turn reads, as a warm turn does: the write checks it.
    await state.channels.since("general", 0, exclude_run="s-1", limit=5, cached=True)
    await state.memory.view("ada", cached=True)
    await run.hold("host-a", NOW, NOW + 30)
    await run.append(record, [entry(1, "user", "hello")])
    assert await state.runs.lease("s-1", "host-b", NOW, NOW + 30) == "host-a"
    assert await run.renew("host-a", NOW + 60)
    await run.record_later(entry(1, "assistant", "hi"))
    posts = (("alice", "hello", NOW), ("ada", "hi", NOW + 1))
    await run.conclude(Posts("general", posts, run="s-1"))
    assert [e.content for e in await state.runs.transcript("s-1")] == ["hello", "hi"]
    assert await state.runs.context("s-1") == [record]
    recent = await state.channels.recent("general", 5)
    assert [(m.seq, m.sender, m.text, m.run) for m in recent] == [
        (1, "alice", "hello", "s-1"),
        (2, "ada", "hi", "s-1"),
    ]
    # Given up with the posts: another holder takes it at once.
    assert await state.runs.lease("s-1", "host-b", NOW, NOW + 30) is None
    await run.let_go("host-a")
    assert await state.runs.lease("s-1", "host-c", NOW, NOW + 30) == "host-b"


@pytest.mark.anyio
async def test_a_reply_kept_for_later_goes_with_the_runs_end(state: State) -> None:
    run = await state.runs.create(session_info("d-1"))
    await run.record_later(entry(1, "assistant", "done"))
    await run.finish("done", NOW + 1)
    assert [e.content for e in await state.runs.transcript("d-1")] == ["done"]
    assert (await state.runs.info("d-1")).status == "done"


@pytest.mark.anyio
async def test_recover_interrupts_open_task_and_direct_runs_only(runs: RunStore) -> None:
    def info(run: str, surface: str) -> RunInfo:
        return RunInfo(id=run, surface=surface, worker="grace", channel=None, created_at=NOW)

    for run_id, surface in [("task-a", "task"), ("direct-a", "direct")]:
        await (await runs.create(info(run_id, surface))).aclose()
    # A session its pair's pointer names: it resumes from its transcript.
    await (await runs.create(session_info("s-open"))).aclose()
    await runs.set_session("ada", "general", "s-open")
    done = await runs.create(info("direct-done", "direct"))
    await done.finish("done", NOW + 1)

    assert await runs.recover(NOW + 10) == 2
    by_id = {i.id: i for i in (await runs.all()).runs}
    for run_id in ("task-a", "direct-a"):
        assert by_id[run_id] == msgspec.structs.replace(
            info(run_id, by_id[run_id].surface),
            status="interrupted",
            ended_at=NOW + 10,
            error="the daemon stopped before this run finished",
        )
    assert by_id["s-open"].status == "open"
    assert by_id["direct-done"].status == "done"
    assert await runs.recover(NOW + 20) == 0


@pytest.mark.anyio
async def test_recovery_leaves_a_run_whose_info_cannot_be_read_and_recovers_the_others(
    runs: RunStore, request: pytest.FixtureRequest
) -> None:
    for run in ("direct-good", "direct-bad"):
        info = RunInfo(id=run, surface="direct", worker="grace", channel=None, created_at=NOW)
        await (await runs.create(info)).aclose()
    await spoil_info(runs, "direct-bad", request)
    assert await runs.recover(NOW + 10) == 1
    listed = await runs.all()
    assert [(i.id, i.status) for i in listed.runs] == [("direct-good", "interrupted")]
    assert [u.run for u in listed.unreadable] == ["direct-bad"]


@pytest.mark.anyio
async def test_session_state_saved_and_loaded_exactly(runs: RunStore) -> None:
    _, state = system_record("s-1")
    await (await runs.create(session_info("s-1"))).aclose()
    assert await runs.load_session("s-1") is None
    await runs.save_session("s-1", state)
    assert await runs.load_session("s-1") == state
    changed = msgspec.structs.replace(
        state, engine=msgspec.structs.replace(state.engine, model="m")
    )
    await runs.save_session("s-1", changed)
    assert await runs.load_session("s-1") == changed


@pytest.mark.anyio
async def test_session_pointers_set_replace_and_clear(runs: RunStore) -> None:
    assert await runs.session_for("ada", "general") is None
    await runs.set_session("ada", "general", "s-1")
    await runs.set_session("ada", "random", "s-2")
    assert await runs.session_for("ada", "general") == "s-1"
    await runs.set_session("ada", "general", "s-3")
    assert await runs.session_for("ada", "general") == "s-3"
    await runs.clear_session("ada", "general")
    await runs.clear_session("ada", "general")
    assert await runs.session_for("ada", "general") is None
    assert await runs.session_for("ada", "random") == "s-2"


@pytest.mark.anyio
async def test_a_lone_surrogate_is_refused_before_anything_is_written(runs: RunStore) -> None:
    # Python strs may hold one; UTF-8 cannot, so msgspec refuses to encode it.
    record, _ = system_record("s-1")
    run = await runs.create(session_info("s-1"))
    with pytest.raises(UnicodeEncodeError):
        await run.trace(with_content(record, 1, "half \ud83d"))
    with pytest.raises(UnicodeEncodeError):
        await run.record_many([entry(1, "user", "fine"), entry(1, "assistant", "\udc00")])
    assert await runs.context("s-1") == []
    assert await runs.transcript("s-1") == []


# What the database adds.


@pytest.mark.anyio
async def test_export_is_byte_identical_to_the_files_context_jsonl(
    postgres_url: str, tmp_path: Path
) -> None:
    record, _ = system_record("s-1")
    traced = [
        record,
        with_content(record, 1, ODD),
        with_content(record, 2, "\u2028" * 3 + "\x00" + "🧪" * 50),
        msgspec.structs.replace(with_content(record, 3, ""), status="failed", at=0.1 + 0.2),
    ]
    files = FileRuns(tmp_path / "state")
    async with postgres_runs(postgres_url) as postgres:
        for store in (files, postgres):
            run = await store.create(session_info("s-1"))
            for item in traced:
                await run.trace(item)
            await run.aclose()
        on_disk = (tmp_path / "state" / "runs" / "s-1" / "context.jsonl").read_bytes()
        assert await postgres.export("s-1") == on_disk == lines(traced)
        assert lines(await postgres.context("s-1")) == on_disk
        assert await postgres.context("s-1") == await files.context("s-1") == traced
        assert await postgres.export("s-nobody") == b""


# Any str UTF-8 can hold: everything but the surrogates. Times are finite:
# msgspec writes inf as null, which neither backend reads back as a float.
_texts = st.text(st.characters(exclude_categories=["Cs"]))
_example = itertools.count()


@pytest.mark.anyio
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    contents=st.lists(_texts, min_size=1, max_size=4),
    at=st.floats(allow_nan=False, allow_infinity=False),
)
async def test_export_matches_the_file_for_any_text_and_time(
    postgres_url: str, tmp_path: Path, contents: list[str], at: float
) -> None:
    # One database and directory for every example: each example its own run.
    run_id = f"s-{next(_example)}"
    record, _ = system_record(run_id)
    traced = [
        msgspec.structs.replace(with_content(record, i, c), at=at) for i, c in enumerate(contents)
    ]
    files = FileRuns(tmp_path / "state")
    async with postgres_runs(postgres_url) as postgres:
        for store in (files, postgres):
            run = await store.create(session_info(run_id, at))
            for item in traced:
                await run.trace(item)
            await run.record_many([entry(1, "user", c) for c in contents])
        on_disk = (tmp_path / "state" / "runs" / run_id / "context.jsonl").read_bytes()
        assert await postgres.export(run_id) == on_disk
        assert await postgres.transcript(run_id) == await files.transcript(run_id)
        assert await postgres.info(run_id) == await files.info(run_id)


@pytest.mark.anyio
async def test_a_second_host_continues_a_session_the_first_wrote(postgres_url: str) -> None:
    record, state = system_record("s-1")
    async with postgres_runs(postgres_url) as host_a, postgres_runs(postgres_url) as host_b:
        run_a = await host_a.create(session_info("s-1"))
        await host_a.save_session("s-1", state)
        await host_a.set_session("ada", "general", "s-1")
        await run_a.trace(record)
        await run_a.trace(with_content(record, 1, "turn one"))
        await run_a.record_many([entry(1, "user", "one"), entry(1, "assistant", "1")])

        assert await host_b.session_for("ada", "general") == "s-1"
        assert await host_b.load_session("s-1") == state
        run_b, transcript = await host_b.reopen(await host_b.info("s-1"))
        assert run_b.last_turn == 1
        assert transcript == await host_a.transcript("s-1")
        await run_b.trace(with_content(record, 2, "turn two"))
        await run_b.record_many([entry(2, "user", "two"), entry(2, "assistant", "2")])
        # Back on A, whose run object knows nothing of B's lines: its write
        # would number a turn B numbered, so it is stale and keeps nothing.
        with pytest.raises(StaleError, match="run s-1 changed"):
            await run_a.append(with_content(record, 2, "two again"), [entry(2, "user", "again")])
        run_a, transcript = await host_a.reopen(await host_a.info("s-1"))
        assert run_a.last_turn == 2
        await run_a.record(entry(3, "user", "three"))

        assert [r.turn for r in await host_a.context("s-1")] == [0, 1, 2]
        assert [(e.turn, e.content) for e in await host_a.transcript("s-1")] == [
            (1, "one"), (1, "1"), (2, "two"), (2, "2"), (3, "three"),
        ]  # fmt: skip
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            cursor = await conn.execute("SELECT n FROM run_transcript WHERE run = 's-1' ORDER BY n")
            assert [n for (n,) in await cursor.fetchall()] == [1, 2, 3, 4, 5]


@pytest.mark.anyio
async def test_two_hosts_appending_at_once_leave_one_hosts_lines_and_stale_the_other(
    postgres_url: str,
) -> None:
    """Two handles on one run (a host that stalled past its lease, and the
    one that took over): the first write to commit wins, and every write of
    the other, which never saw it, is stale and keeps nothing."""
    async with postgres_runs(postgres_url) as host_a, postgres_runs(postgres_url) as host_b:
        run_a = await host_a.create(session_info("s-1"))
        run_b, _ = await host_b.reopen(run_a.info)
        landed: list[str] = []
        stale: list[str] = []

        async def append(run: PostgresRun, i: int) -> None:
            try:
                await run.record_many([entry(i, "user", f"{i}a"), entry(i, "tool", f"{i}b")])
            except StaleError:
                stale.append(f"{i}")
            else:
                landed.append(f"{i}")

        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(append, run_a if i % 2 else run_b, i)
        assert len(landed) + len(stale) == 40 and stale
        winner = {int(i) % 2 for i in landed}
        assert len(winner) == 1, "lines of both hosts landed"
        assert {int(i) % 2 for i in stale} == {1 - winner.pop()}
        transcript = await host_a.transcript("s-1")
        assert [e.content for e in transcript] == [f"{i}{part}" for i in landed for part in "ab"]
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            cursor = await conn.execute("SELECT n FROM run_transcript WHERE run = 's-1' ORDER BY n")
            assert [n for (n,) in await cursor.fetchall()] == list(range(1, 2 * len(landed) + 1))


async def recovered_at_once(host_a: PostgresRuns, host_b: PostgresRuns, at: float) -> list[int]:
    """What *host_a* (recovering at *at*) and *host_b* (a second later), at
    once, each ended, in the order they finished."""
    counts: list[int] = []

    async def recover(host: PostgresRuns, now: float) -> None:
        counts.append(await host.recover(now))

    async with anyio.create_task_group() as tg:
        tg.start_soon(recover, host_a, at)
        tg.start_soon(recover, host_b, at + 1)
    return counts


@pytest.mark.anyio
async def test_two_hosts_recovering_at_once_interrupt_each_run_once(postgres_url: str) -> None:
    async with postgres_runs(postgres_url) as host_a, postgres_runs(postgres_url) as host_b:
        for i in range(30):
            info = RunInfo(
                id=f"task-{i}", surface="task", worker="grace", channel=None, created_at=NOW
            )
            await (await host_a.create(info)).aclose()
        counts = await recovered_at_once(host_a, host_b, NOW + 1)
        assert sum(counts) == 30
        infos = (await host_b.all()).runs
        assert {i.status for i in infos} == {"interrupted"}
        # Each run's info is the one its recovering host wrote, whole.
        assert sorted(sum(i.ended_at == NOW + at for i in infos) for at in (1, 2)) == sorted(counts)


@pytest.mark.anyio
async def test_a_session_nothing_leads_to_is_ended_once_no_live_host_leases_it(
    postgres_url: str,
) -> None:
    async with postgres_runs(postgres_url) as host_a, postgres_runs(postgres_url) as host_b:
        # The pair's session, and one its rollover started before it ended.
        await (await host_a.create(session_info("s-old"))).aclose()
        await host_a.set_session("ada", "general", "s-old")
        rolled = msgspec.structs.replace(session_info("s-new"), rolled_from="s-old")
        await (await host_a.create(rolled)).aclose()
        # A start that no pointer names yet.
        await (await host_a.create(session_info("s-fresh"))).aclose()
        # A rollover that ended the old session, its pointer left behind.
        await (await host_a.create(session_info("s-ended"))).aclose()
        await host_a.set_session("ada", "other", "s-ended")
        ended = msgspec.structs.replace(
            session_info("s-ended"), status="rolled-over", rolled_to="s-next"
        )
        await host_a.write_info(ended)
        next_info = msgspec.structs.replace(session_info("s-next"), rolled_from="s-ended")
        await (await host_a.create(next_info)).aclose()
        # While host a lives, its leases say the start and the rollover go on.
        for run in ("s-old", "s-fresh"):
            assert await host_a.lease(run, "host-a", NOW, NOW + 30) is None
        assert await host_b.recover(NOW + 10) == 0
        counts = await recovered_at_once(host_a, host_b, NOW + 31)
        infos = {i.id: i for i in (await host_b.all()).runs}
    assert sum(counts) == 2
    statuses = {run: info.status for run, info in infos.items()}
    assert statuses == {
        "s-old": "open",
        "s-new": "failed",
        "s-fresh": "failed",
        "s-ended": "rolled-over",
        "s-next": "open",
    }
    assert "no pair leads to it" in (infos["s-new"].error or "")


@pytest.mark.anyio
async def test_a_held_write_after_another_hosts_write_is_stale_and_keeps_nothing(
    postgres_url: str,
) -> None:
    async with PostgresState(postgres_url) as here, PostgresState(postgres_url) as there:
        run = await here.runs.create(session_info("s-1"))
        record, _ = system_record("s-1", turn=1)
        # What a warm turn reads, held here.
        await here.channels.since("general", 0, exclude_run="s-1", limit=5)
        await here.memory.view("ada")
        await here.runs.lease("s-1", "host-a", NOW, NOW + 30)
        await here.runs.release("s-1", "host-a")
        await run.hold("host-a", NOW, NOW + 30)
        await run.append(record, [entry(1, "user", "one")])
        await run.conclude(Posts("general", (("alice", "one", NOW),), run="s-1"))
        await run.let_go("host-a")
        # Another host posts in the channel: the next warm write finds it.
        await there.channels.post_many("general", [("bob", "meanwhile", NOW)])
        backlog = await here.channels.since("general", 1, exclude_run="s-1", limit=5, cached=True)
        assert backlog == ((), 0, 1)  # what this host holds: not the post
        await run.hold("host-a", NOW, NOW + 30)
        with pytest.raises(StaleError, match="channel general changed"):
            await run.append(with_content(record, 2, "two"), [entry(2, "user", "two")])
        await run.let_go("host-a")
        assert [e.content for e in await here.runs.transcript("s-1")] == ["one"]
        assert await there.runs.lease("s-1", "host-b", NOW, NOW + 30) is None
        await there.runs.release("s-1", "host-b")
        # Read again, it holds the post, and the write goes through.
        backlog = await here.channels.since("general", 1, exclude_run="s-1", limit=5)
        assert [m.text for m in backlog[0]] == ["meanwhile"]
        await run.hold("host-a", NOW, NOW + 30)
        await run.append(with_content(record, 2, "two"), [entry(2, "user", "two")])
        assert [e.content for e in await there.runs.transcript("s-1")] == ["one", "two"]
        # A note another host adds, and a turn it writes to the session.
        await there.memory.add("ada", "a note", None, NOW)
        await run.let_go("host-a")
        await run.hold("host-a", NOW, NOW + 30)
        with pytest.raises(StaleError, match="the memory of ada changed"):
            await run.record(entry(2, "assistant", "late"))
        theirs, _ = await there.runs.reopen(session_info("s-1"))
        await theirs.record(entry(3, "user", "there"))
        await here.memory.view("ada")
        with pytest.raises(StaleError, match="run s-1 changed"):
            await run.record(entry(2, "assistant", "late"))
        assert [e.content for e in await here.runs.transcript("s-1")] == ["one", "two", "there"]


@pytest.mark.anyio
async def test_a_lease_another_host_took_while_its_holder_waited_to_renew_is_lost(
    postgres_url: str,
) -> None:
    """Host A renews a lease that ran out just as host B takes it over, A's
    statement waiting for B's: A learns B holds it, never that it kept it."""
    async with (
        postgres_runs(postgres_url) as host_a,
        postgres_runs(postgres_url) as host_b,
        await psycopg.AsyncConnection.connect(postgres_url) as slow,
    ):
        assert await host_a.lease("s-1", "host-a", NOW, NOW + 10) is None
        # A transaction on the lease row (any host's statement in flight)
        # makes both hosts' statements wait, B's first.
        await slow.execute("SELECT FROM leases WHERE key = 's-1' FOR UPDATE")
        answers: dict[str, str | None] = {}

        async def lease(host: PostgresRuns, holder: str, now: float) -> None:
            answers[holder] = await host.lease("s-1", holder, now, now + 10)

        async with anyio.create_task_group() as tg:
            tg.start_soon(lease, host_b, "host-b", NOW + 20)
            with anyio.fail_after(10):
                await waiting_on_locks(postgres_url, 1)
            tg.start_soon(lease, host_a, "host-a", NOW + 15)
            with anyio.fail_after(10):
                await waiting_on_locks(postgres_url, 2)
            await slow.rollback()
        assert answers == {"host-b": None, "host-a": "host-b"}
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            cursor = await conn.execute("SELECT holder FROM leases WHERE key = 's-1'")
            assert await cursor.fetchall() == [("host-b",)]


@pytest.mark.anyio
async def test_appending_to_a_run_that_was_never_created_is_not_found(
    postgres_url: str,
) -> None:
    async with postgres_runs(postgres_url) as store:
        run, _ = await store.reopen(session_info("s-ghost"))
        with pytest.raises(NotFoundError):
            await run.record(entry(1, "user", "hi"))


@pytest.mark.anyio
async def test_recovery_reads_open_runs_through_the_partial_index(postgres_url: str) -> None:
    async with postgres_runs(postgres_url) as store:
        await (await store.create(session_info("s-1"))).aclose()
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        # Off, a scan of every run is what the planner would pick if it could.
        await conn.execute("SET enable_seqscan = off")
        for query in (OPEN_RUNS, UNREACHED_SESSIONS):
            cursor = await conn.execute(f"EXPLAIN {query}", {"session": "session", "now": 0.0})
            plan = "\n".join(line for (line,) in await cursor.fetchall())
            assert "runs_open" in plan, plan
            assert "Seq Scan on runs" not in plan, plan


@pytest.mark.anyio
async def test_database_errors_are_storage_errors_naming_no_password(postgres_url: str) -> None:
    # Nothing listens on port 1: every connection attempt fails.
    url = "postgresql://rosterd:hunter2-secret@127.0.0.1:1/state?connect_timeout=1"
    async with AsyncConnectionPool(url, min_size=1, timeout=0.5, open=False) as pool:
        await pool.open(wait=False)
        store = PostgresRuns(Database(pool, redact(url)))
        with pytest.raises(StorageError) as raised:
            await store.info("s-1")
    error = raised.value
    assert (error.path, error.op) == (
        "postgresql://rosterd:***@127.0.0.1:1/state?connect_timeout=1",
        "read run info",
    )
    assert "hunter2" not in str(error) and error.__cause__ is None

    async with postgres_runs(postgres_url) as store:
        run = await store.create(session_info("s-1"))
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
            await conn.execute("DROP TABLE run_transcript")
        with pytest.raises(StorageError) as raised:
            await run.record(entry(1, "user", "hi"))
        assert raised.value.op == "record"
        assert "run_transcript" in str(raised.value)
