"""The store contract (rosterd/stores/_interface.py), held by every backend.

Every test but the last few takes the ``state`` fixture, one opened empty
state per backend, and asserts the same thing of each. The last ones are
about PostgreSQL only: several hosts on one database, rows that hold the
file backend's exact lines, and a database that cannot be reached.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import LiteralString

import anyio
import anyio.lowlevel
import anyio.to_thread
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from postgres import PostgresServer

from rosterd._errors import ConflictError, InvalidIdError, NotFoundError, StorageError
from rosterd.compiler import Boundary, ChannelMessage, MemoryIndex, PrefixState, Retirement
from rosterd.protocol import RunInfo, TaskState, TranscriptEntry
from rosterd.stores import State
from rosterd.stores.files import FileState
from rosterd.stores.postgres import PostgresState

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def reopened(state: State) -> AsyncIterator[State]:
    """*state* closed, and a new one of its backend opened on the same place
    (the fixture's second close of *state* does nothing)."""
    await state.aclose()
    again: FileState | PostgresState
    if isinstance(state, FileState):
        again = FileState(state.root)
    else:
        assert isinstance(state, PostgresState)
        again = PostgresState(state.url)
    async with again:
        yield again


def _prefix(run: str, at: float, sha: str = "a" * 64) -> PrefixState:
    return PrefixState(
        run=run,
        at=at,
        engine_fingerprint="echo:1",
        blocks=(("identity", sha),),
        boundaries=(Boundary(name="system", offset=10, sha256=sha),),
    )


# Channels


async def test_posts_are_numbered_from_one_in_order_per_channel(state: State) -> None:
    first = await state.channels.post_many("c", [("ada", "hi", 1.0), ("bob", "yo", 2.0)], run="r1")
    second = await state.channels.post_many("c", [("cy", "hey", 3.0)])
    other = await state.channels.post_many("d", [("ada", "elsewhere", 4.0)])
    assert first == [
        ChannelMessage(seq=1, sender="ada", text="hi", at=1.0, run="r1"),
        ChannelMessage(seq=2, sender="bob", text="yo", at=2.0, run="r1"),
    ]
    assert second == [ChannelMessage(seq=3, sender="cy", text="hey", at=3.0)]
    assert [m.seq for m in other] == [1]
    assert await state.channels.post_many("c", []) == []
    assert await state.channels.last_seq("c") == 3
    assert await state.channels.last_seq("d") == 1
    assert await state.channels.last_seq("never-posted") == 0


async def test_recent_is_the_newest_messages_oldest_first(state: State) -> None:
    posted = await state.channels.post_many("c", [("ada", f"m{i}", float(i)) for i in range(5)])
    assert await state.channels.recent("c", 3) == tuple(posted[2:])
    assert await state.channels.recent("c", 50) == tuple(posted)
    assert await state.channels.recent("c", 0) == ()
    assert await state.channels.recent("never-posted", 5) == ()


async def test_since_keeps_the_newest_of_others_and_counts_the_rest(state: State) -> None:
    channels = state.channels
    await channels.post_many("c", [("u", "old", 1.0)])
    mine = await channels.post_many("c", [("me", "mine", 2.0)], run="me")
    others = await channels.post_many("c", [("u", f"new{i}", 3.0 + i) for i in range(4)], run="x")
    assert mine[0].seq == 2
    kept, omitted, last = await channels.since("c", 1, exclude_run="me", limit=2)
    assert (kept, omitted, last) == (tuple(others[2:]), 2, 6)
    assert await channels.since("c", 0, exclude_run="me", limit=10) == (
        (ChannelMessage(seq=1, sender="u", text="old", at=1.0), *others),
        0,
        6,
    )
    # The excluded run's own messages are neither kept nor counted.
    assert await channels.since("c", 1, exclude_run="x", limit=10) == (tuple(mine), 0, 6)
    assert await channels.since("c", 6, exclude_run="me", limit=10) == ((), 0, 6)
    assert await channels.since("c", 1, exclude_run="me", limit=0) == ((), 4, 6)
    assert await channels.since("never-posted", 0, exclude_run="me", limit=3) == ((), 0, 0)


async def test_a_read_among_racing_posts_reports_only_seqs_it_can_show(state: State) -> None:
    # Racing posts share writes on files; a read while some are in flight
    # must not report their seqs as the last, or a session that takes that
    # as seen would never be shown them.
    channels = state.channels
    reads: list[tuple[tuple[int, ...], int]] = []

    async def post(n: int) -> None:
        await channels.post_many("race", [("u", f"m{n}", float(n))])

    async def read() -> None:
        for _ in range(40):
            kept, _, last = await channels.since("race", 0, exclude_run="none", limit=100)
            reads.append((tuple(m.seq for m in kept), last))
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(post, n)
        tg.start_soon(read)
    assert all(kept == tuple(range(1, last + 1)) for kept, last in reads), reads
    assert await channels.last_seq("race") == 20


_RUNS = st.sampled_from([None, "r1", "r2"])
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("post"), st.lists(_RUNS, min_size=1, max_size=3)),
        st.tuples(
            st.just("since"), st.integers(0, 12), st.sampled_from(["r1", "r2"]), st.integers(0, 4)
        ),
    ),
    max_size=10,
)
_channel_names = itertools.count()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=_OPS)
async def test_since_matches_a_reference_model(state: State, ops: list[tuple[object, ...]]) -> None:
    channel = f"model-{next(_channel_names)}"  # one per example: they share the state
    model: list[str | None] = []  # each message's run, by seq - 1
    for op in ops:
        if op[0] == "post":
            runs = op[1]
            assert isinstance(runs, list)
            for run in runs:
                [message] = await state.channels.post_many(channel, [("s", "t", 1.0)], run=run)
                model.append(run)
                assert message.seq == len(model)
        else:
            _, after, exclude, limit = op
            assert isinstance(after, int) and isinstance(exclude, str) and isinstance(limit, int)
            new = [seq for seq, run in enumerate(model, 1) if seq > after and run != exclude]
            kept = new[max(0, len(new) - limit) :] if limit else []
            got, omitted, last = await state.channels.since(
                channel, after, exclude_run=exclude, limit=limit
            )
            assert [m.seq for m in got] == kept
            assert [m.run for m in got] == [model[seq - 1] for seq in kept]
            assert (omitted, last) == (len(new) - len(kept), len(model))


async def test_a_channel_id_that_is_not_an_id_is_refused(state: State) -> None:
    with pytest.raises(InvalidIdError):
        await state.channels.post_many("../etc", [("ada", "hi", 1.0)])
    with pytest.raises(InvalidIdError):
        await state.channels.recent("a/b", 3)


# Memory


async def test_notes_are_numbered_per_worker_and_listed_oldest_first(state: State) -> None:
    one = await state.memory.add("ada", "likes tea", None, 1.0)
    two = await state.memory.add("ada", "deploys on fridays", "ops", 2.0)
    other = await state.memory.add("bob", "likes coffee", None, 3.0)
    assert (one.id, two.id, other.id) == ("m-1", "m-2", "m-1")
    assert (two.text, two.channel, two.created_at) == ("deploys on fridays", "ops", 2.0)
    assert await state.memory.items("ada") == (one, two)
    assert await state.memory.items("bob") == (other,)
    assert await state.memory.items("nobody") == ()


async def test_a_memory_view_is_a_snapshot_that_later_notes_do_not_change(state: State) -> None:
    await state.memory.add("ada", "the deploy key rotates monthly", None, 1.0)
    before = await state.memory.view("ada")
    added = await state.memory.add("ada", "deploy freeze in december", None, 2.0)
    after = await state.memory.view("ada")
    assert len(before) == 1
    assert len(after) == 2
    assert added not in list(before.ranked_all("deploy"))
    assert next(iter(after.ranked("december deploy", None))) == added
    assert len(await state.memory.view("nobody")) == 0


async def _many_notes(state: State) -> list[str]:
    """Notes enough for a log of over 100 KB: their texts, in the order added."""
    texts = [
        f"note {n}: the {('release', 'deploy', 'review')[n % 3]} moved to day {n}"
        for n in range(800)
    ]
    for n, text in enumerate(texts):
        await state.memory.add("ada", text, None, float(n))
    return texts


async def test_a_worker_s_many_notes_read_back_after_a_reopen_rank_as_written(
    state: State,
) -> None:
    texts = await _many_notes(state)
    async with reopened(state) as again:
        items = await again.memory.items("ada")
        view = await again.memory.view("ada")
    assert [item.text for item in items] == texts
    expected = [item.id for item in MemoryIndex(items).snapshot().ranked_all("deploy day 7")]
    assert [item.id for item in view.ranked_all("deploy day 7")] == expected


async def test_a_torn_last_note_of_a_long_log_is_dropped_and_cut(tmp_path: Path) -> None:
    async with FileState(tmp_path) as state:
        texts = await _many_notes(state)
    log = anyio.Path(tmp_path / "memory" / "ada.jsonl")
    whole = await log.read_bytes()
    assert len(whole) > 64 * 1024
    # What a kill in the middle of an append leaves.
    await log.write_bytes(whole + b'{"id": "m-801", "text": "cut sh')
    async with FileState(tmp_path) as state:
        view = await state.memory.view("ada")
        assert [item.text for item in view.index.items()] == texts
    assert await log.read_bytes() == whole


async def test_a_note_a_run_wrote_names_its_worker_run_and_turn(state: State) -> None:
    note = await state.memory.add("ada", "releases on tuesdays", "ops", 1.0, run="s-1", turn=3)
    operator = await state.memory.add("ada", "likes tea", None, 2.0)
    assert (note.author, note.run, note.turn) == ("worker", "s-1", 3)
    assert (operator.author, operator.run, operator.turn) == ("operator", None, None)
    view = await state.memory.view("ada")
    assert view.written_by("s-1") == [note]
    assert view.written_by("s-2") == []


async def test_a_retired_note_never_ranks_again_and_its_retirement_is_kept(state: State) -> None:
    tea = await state.memory.add("ada", "likes tea", None, 1.0)
    ops = await state.memory.add("ada", "tea breaks at four", "ops", 2.0)
    before = await state.memory.view("ada")
    because = Retirement(note=ops.id, because="moved", at=3.0, author="worker", run="s-1", turn=2)
    assert await state.memory.retire("ada", because, ["ops", None]) == ops
    after = await state.memory.view("ada")
    assert list(after.ranked("tea", "ops")) == [tea]
    assert list(after.ranked_all("tea breaks")) == [tea]
    assert after.totals("ops") == (1, len(tea.text))
    # A view taken before keeps ranking what it held.
    assert list(before.ranked("tea breaks", "ops")) == [ops, tea]
    assert await state.memory.items("ada") == (tea, ops)
    assert await state.memory.retirements("ada") == {ops.id: because}
    # Retired already, or never written: no such live note.
    for note in (ops.id, "m-9"):
        with pytest.raises(NotFoundError):
            await state.memory.retire("ada", Retirement(note=note, because="x", at=4.0))
    async with reopened(state) as again:
        assert list((await again.memory.view("ada")).ranked_all("tea breaks")) == [tea]
        assert await again.memory.retirements("ada") == {ops.id: because}
        assert (await again.memory.add("ada", "more", None, 5.0)).id == "m-3"


async def test_a_retirement_out_of_its_channels_is_no_such_note(state: State) -> None:
    wide = await state.memory.add("ada", "likes tea", None, 1.0)
    elsewhere = await state.memory.add("ada", "deploys on fridays", "ops", 2.0)
    for note, channels in ((wide.id, ["dev"]), (elsewhere.id, ["dev", None])):
        with pytest.raises(NotFoundError) as refused:
            await state.memory.retire("ada", Retirement(note=note, because="x", at=3.0), channels)
        assert str(refused.value) == f"unknown note {note!r}"
    assert await state.memory.retirements("ada") == {}
    assert len(list((await state.memory.view("ada")).ranked_all("tea"))) == 2


async def test_a_worker_id_that_is_not_an_id_is_refused(state: State) -> None:
    with pytest.raises(InvalidIdError):
        await state.memory.add("../ada", "x", None, 1.0)
    with pytest.raises(InvalidIdError):
        await state.memory.retire("../ada", Retirement(note="m-1", because="x", at=1.0))
    with pytest.raises(InvalidIdError):
        await state.memory.view("a b")


# Gates


async def test_gates_are_numbered_and_listed_in_filing_order(state: State) -> None:
    gates = state.gates
    late = await gates.file("ada", "ship it?", 5.0, "c", "r1")
    early = await gates.file("bob", "which region?", 1.0, None, None)
    third = await gates.file("ada", "rename?", 6.0, None, "r2")
    assert (late.id, early.id, third.id) == ("g-1", "g-2", "g-3")
    assert (late.worker, late.summary, late.channel, late.run) == ("ada", "ship it?", "c", "r1")
    assert (late.status, late.outcome, late.resolved_at) == ("open", None, None)
    assert await gates.get("g-1") == late
    assert await gates.all() == [early, late, third]
    assert await gates.all("ada") == [late, third]
    assert await gates.all("nobody") == []


async def test_a_gate_is_resolved_once(state: State) -> None:
    gate = await state.gates.file("ada", "ship it?", 1.0, None, None)
    resolved = await state.gates.resolve(gate.id, "approved", "go ahead", 2.0)
    assert (resolved.id, resolved.status, resolved.outcome) == (gate.id, "resolved", "approved")
    assert (resolved.note, resolved.resolved_at) == ("go ahead", 2.0)
    assert await state.gates.get(gate.id) == resolved
    with pytest.raises(ConflictError):
        await state.gates.resolve(gate.id, "denied", "", 3.0)
    assert await state.gates.get(gate.id) == resolved


@pytest.mark.parametrize(
    "gate_id", ["g-99", "g-0", "task-1", "nonsense", "g-", "g-1x", "g-" + "9" * 30]
)
async def test_an_unknown_gate_is_not_found(state: State, gate_id: str) -> None:
    await state.gates.file("ada", "ship it?", 1.0, None, None)
    with pytest.raises(NotFoundError):
        await state.gates.get(gate_id)
    with pytest.raises(NotFoundError):
        await state.gates.resolve(gate_id, "approved", "", 2.0)


async def test_a_briefing_has_open_gates_and_those_resolved_since(state: State) -> None:
    gates = state.gates
    old = await gates.file("ada", "old question", 1.0, None, None)
    recent = await gates.file("ada", "recent question", 2.0, "c", None)
    still_open = await gates.file("ada", "open question", 3.0, "c", None)
    elsewhere = await gates.file("ada", "other channel", 3.5, "d", None)
    theirs = await gates.file("bob", "not ada's", 4.0, None, None)
    await gates.resolve(old.id, "yes", "", 10.0)
    await gates.resolve(recent.id, "no", "why not", 20.0)
    await gates.resolve(theirs.id, "yes", "", 30.0)

    view = await gates.briefing_for("ada", 15.0)
    assert [g.id for g in view.open("c")] == [still_open.id]
    assert [g.id for g in view.open("d")] == [elsewhere.id]
    assert [(g.id, g.outcome, g.note) for g in view.resolved] == [(recent.id, "no", "why not")]
    everything = await gates.briefing_for("ada", 0.0)
    assert [g.id for g in everything.resolved] == [old.id, recent.id]
    assert (await gates.briefing_for("ada", None)).resolved == ()
    assert list((await gates.briefing_for("nobody", 0.0)).open("c")) == []


async def test_waiting_on_follows_open_gates_of_a_run(state: State) -> None:
    gates = state.gates
    first = await gates.file("ada", "one", 1.0, None, "r1")
    second = await gates.file("ada", "two", 2.0, None, "r1")
    assert await gates.waiting_on("r1")
    assert not await gates.waiting_on("r2")
    await gates.resolve(first.id, "yes", "", 3.0)
    assert await gates.waiting_on("r1")
    await gates.resolve(second.id, "yes", "", 4.0)
    assert not await gates.waiting_on("r1")


async def test_the_gates_against_runs_are_found_by_run_and_the_open_ones_alone(
    state: State,
) -> None:
    gates = state.gates
    late = await gates.file("ada", "one", 2.0, None, "r1")
    other = await gates.file("ada", "two", 3.0, "c", "r2")
    await gates.file("bob", "no run", 4.0, None, None)
    early = await gates.file("ada", "three", 1.0, None, "r1")
    resolved = await gates.resolve(other.id, "yes", "", 5.0)
    # In filing order: early was filed first, whatever its number.
    assert await gates.open_against_runs() == [early, late]
    assert await gates.against(["r2", "r1"]) == [early, late, resolved]
    assert await gates.against({"r2", "r9"}) == [resolved]
    assert await gates.against([]) == []
    await gates.resolve(early.id, "no", "", 6.0)
    assert await gates.open_against_runs() == [late]


# Tasks


async def test_tasks_are_numbered_and_read_back(state: State) -> None:
    tasks = state.tasks
    first = await tasks.submit("ada", "c", "write the report", 1.0)
    second = await tasks.submit("bob", "d", "review it", 2.0)
    assert (first.id, second.id) == ("task-1", "task-2")
    assert (first.worker, first.channel, first.text, first.submitted_at) == (
        "ada",
        "c",
        "write the report",
        1.0,
    )
    assert (first.status, first.runs, first.updated_at) == ("queued", (), 1.0)
    assert await tasks.get("task-2") == second
    assert await tasks.all() == [first, second]


async def test_a_task_update_is_stored_whole_and_found_by_its_runs(state: State) -> None:
    tasks = state.tasks
    task = await tasks.submit("ada", "c", "write the report", 1.0)
    running = TaskState(
        id=task.id,
        worker=task.worker,
        channel=task.channel,
        text=task.text,
        submitted_at=task.submitted_at,
        status="running",
        runs=("run-1",),
        updated_at=2.0,
    )
    assert await tasks.update(running) == running
    assert await tasks.get(task.id) == running
    assert await tasks.by_run("run-1") == running
    assert await tasks.by_run("run-2") is None
    paused = replace(running, status="paused", runs=("run-1", "run-2"))
    await tasks.update(paused)
    assert await tasks.by_run("run-1") == paused
    assert await tasks.by_run("run-2") == paused


async def test_the_gated_tasks_are_the_paused_ones_and_the_done_ones_of_the_given_last_runs(
    state: State,
) -> None:
    tasks = state.tasks

    async def task(status: str, *runs: str) -> TaskState:
        submitted = await tasks.submit("ada", "c", status, 1.0)
        return await tasks.update(replace(submitted, status=status, runs=runs))

    paused = await task("paused", "r1")
    done = await task("done", "r2", "r3")
    await task("done", "r4")
    await task("failed", "r5")
    await task("queued")
    again = await task("paused", "r6", "r7")
    # Once each, in submission order, however many of its runs are given.
    assert await tasks.gated({"r2", "r3", "r5"}) == [paused, done, again]
    assert await tasks.gated(["r2"]) == [paused, again]
    assert await tasks.gated([]) == [paused, again]


async def test_tasks_are_counted_by_status_as_they_move(state: State) -> None:
    tasks = state.tasks
    assert await tasks.counts() == {}
    for status in ["done", "paused", "done", "failed", "queued", "done"]:
        submitted = await tasks.submit("ada", "c", status, 1.0)
        await tasks.update(replace(submitted, status=status, updated_at=2.0))
    claimed = await tasks.claim("host-a", 10.0, 40.0)
    assert claimed is not None
    await tasks.update(replace(claimed, status="running"))
    await tasks.submit("bob", "d", "next", 3.0)
    counted = {"done": 3, "paused": 1, "failed": 1, "running": 1, "queued": 1}
    assert await tasks.counts() == counted
    # A file backend counts what it read back, as the database does.
    async with reopened(state) as again:
        assert await again.tasks.counts() == counted


async def test_claims_take_the_tasks_queued_or_cut_off_while_running(state: State) -> None:
    tasks = state.tasks
    by_status: dict[str, list[TaskState]] = {}
    for at, status in enumerate(["queued", "running", "paused", "done", "failed", "queued"]):
        task = await tasks.submit("ada", "c", status, float(10 - at))
        by_status.setdefault(status, []).append(await tasks.update(replace(task, status=status)))
    pending: list[TaskState] = []
    while (claimed := await tasks.claim(f"host-{len(pending)}", 100.0, 130.0)) is not None:
        pending.append(claimed)
    # In submission order: each task here was submitted at an earlier time
    # than the one before it.
    assert [(t.id, t.status) for t in pending] == [
        ("task-6", "queued"),
        ("task-2", "running"),
        ("task-1", "queued"),
    ]
    assert pending == [by_status["queued"][1], by_status["running"][0], by_status["queued"][0]]
    assert [t.id for t in await tasks.all()] == [f"task-{n}" for n in range(6, 0, -1)]


async def test_a_task_is_claimed_by_one_holder_until_its_lease_runs_out(state: State) -> None:
    tasks = state.tasks
    first = await tasks.submit("ada", "general", "one", 1.0)
    second = await tasks.submit("ada", "general", "two", 2.0)
    claimed = await tasks.claim("host-a", 10.0, 40.0)
    assert claimed is not None and claimed.id == first.id
    again = await tasks.claim("host-b", 10.0, 40.0)
    assert again is not None and again.id == second.id
    assert await tasks.claim("host-b", 20.0, 50.0) is None
    assert await tasks.renew(first.id, "host-a", 60.0)
    # host-b's lease ran out: host-a takes its task, and host-b has lost it.
    taken = await tasks.claim("host-a", 55.0, 90.0)
    assert taken is not None and taken.id == second.id
    assert not await tasks.renew(second.id, "host-b", 99.0)
    await tasks.release(first.id, "host-a")
    freed = await tasks.claim("host-c", 56.0, 90.0)
    assert freed is not None and freed.id == first.id
    await tasks.update(replace(freed, status="done"))
    await tasks.release(first.id, "host-c")
    assert await tasks.claim("host-c", 100.0, 130.0) == replace(second)


async def test_a_run_lease_is_one_holders_until_it_runs_out(state: State) -> None:
    runs = state.runs
    assert await runs.lease("s-1", "host-a", 10.0, 40.0) is None
    assert await runs.lease("s-1", "host-b", 20.0, 50.0) == "host-a"
    assert await runs.lease("s-1", "host-a", 30.0, 60.0) is None  # renewed
    assert await runs.lease("s-1", "host-b", 59.0, 90.0) == "host-a"
    assert await runs.lease("s-1", "host-b", 60.0, 90.0) is None  # ran out
    await runs.release("s-1", "host-a")  # not its holder any more: nothing
    assert await runs.lease("s-1", "host-a", 61.0, 90.0) == "host-b"
    await runs.release("s-1", "host-b")
    assert await runs.lease("s-1", "host-a", 61.0, 90.0) is None


@pytest.mark.parametrize("task_id", ["task-99", "task-0", "g-1", "nonsense", "task-1.5"])
async def test_an_unknown_task_is_not_found(state: State, task_id: str) -> None:
    await state.tasks.submit("ada", "c", "x", 1.0)
    with pytest.raises(NotFoundError):
        await state.tasks.get(task_id)


# Prefixes


async def test_prefixes_are_kept_per_worker_and_channel(state: State) -> None:
    prefixes = state.prefixes
    assert await prefixes.get("ada", "c") is None
    in_channel = _prefix("run-1", 1.0)
    direct = _prefix("run-2", 2.0, sha="b" * 64)
    await prefixes.put("ada", "c", in_channel)
    await prefixes.put("ada", None, direct)
    assert await prefixes.get("ada", "c") == in_channel
    assert await prefixes.get("ada", None) == direct
    assert await prefixes.get("bob", "c") is None
    # A later turn of the same session: the newer state is what get returns.
    later = _prefix("run-1", 5.0)
    await prefixes.put("ada", "c", later)
    assert await prefixes.get("ada", "c") == later
    other_run = _prefix("run-3", 6.0, sha="c" * 64)
    await prefixes.put("ada", "c", other_run)
    assert await prefixes.get("ada", "c") == other_run


# Concurrency


async def test_racing_posts_get_distinct_seqs_in_order(state: State) -> None:
    results: list[list[ChannelMessage]] = []

    async def post(n: int) -> None:
        posts = [("ada", f"{n}-a", 1.0), ("ada", f"{n}-b", 1.0)]
        results.append(await state.channels.post_many("c", posts, run=f"r{n}"))

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(post, n)
    for messages in results:
        # A call's messages are consecutive, in the order given.
        assert messages[1].seq == messages[0].seq + 1
        assert messages[0].text.endswith("-a")
    assert sorted(m.seq for ms in results for m in ms) == list(range(1, 41))
    stored = await state.channels.recent("c", 40)
    assert stored == tuple(sorted((m for ms in results for m in ms), key=lambda m: m.seq))


async def test_racing_note_adds_get_distinct_ids_in_order(state: State) -> None:
    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(state.memory.add, "ada", f"note {n}", None, float(n))
    items = await state.memory.items("ada")
    assert [item.id for item in items] == [f"m-{n}" for n in range(1, 21)]
    assert sorted(item.text for item in items) == sorted(f"note {n}" for n in range(20))
    assert len(await state.memory.view("ada")) == 20


async def test_racing_gates_and_tasks_get_distinct_ids(state: State) -> None:
    async with anyio.create_task_group() as tg:
        for n in range(10):
            tg.start_soon(state.gates.file, "ada", f"q{n}", float(n), None, f"r{n}")
            tg.start_soon(state.tasks.submit, "ada", "c", f"t{n}", float(n))
    assert sorted(g.id for g in await state.gates.all()) == sorted(f"g-{n}" for n in range(1, 11))
    assert sorted(t.id for t in await state.tasks.all()) == sorted(
        f"task-{n}" for n in range(1, 11)
    )
    assert [g.summary for g in (await state.gates.briefing_for("ada", None)).open(None)] == [
        f"q{n}" for n in range(10)
    ]


async def test_racing_resolutions_of_one_gate_have_one_winner(state: State) -> None:
    gate = await state.gates.file("ada", "ship it?", 1.0, None, "r1")
    won: list[str] = []
    lost: list[str] = []

    async def resolve(outcome: str) -> None:
        try:
            await state.gates.resolve(gate.id, outcome, "", 2.0)
        except ConflictError:
            lost.append(outcome)
        else:
            won.append(outcome)

    async with anyio.create_task_group() as tg:
        for n in range(8):
            tg.start_soon(resolve, f"outcome-{n}")
    assert len(won) == 1
    assert len(lost) == 7
    assert (await state.gates.get(gate.id)).outcome == won[0]
    assert not await state.gates.waiting_on("r1")


# Reopening


async def test_everything_is_still_there_after_a_reopen(state: State) -> None:
    posted = await state.channels.post_many("c", [("ada", "hi", 1.0)], run="r1")
    note = await state.memory.add("ada", "likes tea", "c", 2.0)
    gate = await state.gates.file("ada", "ship it?", 3.0, "c", "r1")
    resolved = await state.gates.resolve(
        (await state.gates.file("ada", "old", 0.5, None, None)).id, "yes", "", 4.0
    )
    task = await state.tasks.submit("ada", "c", "write it", 5.0)
    task = await state.tasks.update(replace(task, status="running", runs=("r1",)))
    prefix = _prefix("r1", 6.0)
    await state.prefixes.put("ada", "c", prefix)

    async with reopened(state) as again:
        assert await again.channels.recent("c", 10) == tuple(posted)
        assert await again.channels.last_seq("c") == 1
        assert await again.memory.items("ada") == (note,)
        assert len(await again.memory.view("ada")) == 1
        assert await again.gates.all() == [resolved, gate]
        view = await again.gates.briefing_for("ada", 3.5)
        assert [g.id for g in view.open("c")] == [gate.id]
        assert [g.id for g in view.resolved] == [resolved.id]
        assert await again.gates.waiting_on("r1")
        assert await again.tasks.get(task.id) == task
        assert await again.tasks.by_run("r1") == task
        assert await again.tasks.claim("host-a", 10.0, 40.0) == task
        assert await again.prefixes.get("ada", "c") == prefix
        # Numbering goes on from what is stored.
        assert (await again.channels.post_many("c", [("bob", "yo", 7.0)]))[0].seq == 2
        assert (await again.memory.add("ada", "more", None, 8.0)).id == "m-2"
        assert (await again.gates.file("ada", "next", 9.0, None, None)).id == "g-3"
        assert (await again.tasks.submit("ada", "c", "next", 9.0)).id == "task-2"


# PostgreSQL: several hosts on one database


@asynccontextmanager
async def two_hosts(url: str) -> AsyncIterator[tuple[PostgresState, PostgresState]]:
    async with PostgresState(url) as one, PostgresState(url) as two:
        yield one, two


async def test_a_note_added_on_one_host_is_in_the_next_view_of_another(postgres_url: str) -> None:
    async with two_hosts(postgres_url) as (one, two):
        assert len(await two.memory.view("ada")) == 0
        first = await one.memory.add("ada", "rotate the deploy key", None, 1.0)
        view = await two.memory.view("ada")
        assert len(view) == 1
        assert list(view.ranked("deploy", None)) == [first]
        second = await two.memory.add("ada", "freeze in december", None, 2.0)
        assert second.id == "m-2"
        assert await one.memory.items("ada") == (first, second)
        assert await two.memory.items("ada") == (first, second)


async def test_a_note_retired_on_one_host_ranks_on_neither(postgres_url: str) -> None:
    async with two_hosts(postgres_url) as (one, two):
        tea = await one.memory.add("ada", "likes tea", None, 1.0)
        green = await one.memory.add("ada", "green tea only", None, 2.0)
        assert len(list((await two.memory.view("ada")).ranked_all("tea"))) == 2
        await one.memory.retire("ada", Retirement(note=green.id, because="x", at=3.0))
        assert list((await two.memory.view("ada")).ranked_all("tea")) == [tea]
        # Both hosts retire the same note: the first counts, the note is gone.
        await two.memory.retire("ada", Retirement(note=tea.id, because="first", at=4.0))
        with pytest.raises(NotFoundError):
            await two.memory.retire("ada", Retirement(note=tea.id, because="again", at=5.0))
        assert list((await one.memory.view("ada")).ranked_all("tea")) == []
        assert (await one.memory.retirements("ada"))[tea.id].because == "first"


async def test_gates_filed_and_resolved_on_one_host_change_the_others_briefing(
    postgres_url: str,
) -> None:
    async with two_hosts(postgres_url) as (one, two):
        assert not await two.gates.waiting_on("r1")
        gate = await one.gates.file("ada", "ship it?", 1.0, "c", "r1")
        assert [g.id for g in (await two.gates.briefing_for("ada", None)).open("c")] == [gate.id]
        assert await two.gates.waiting_on("r1")
        await two.gates.resolve(gate.id, "approved", "", 2.0)
        briefing = await one.gates.briefing_for("ada", 1.5)
        assert list(briefing.open("c")) == []
        assert [(g.id, g.outcome) for g in briefing.resolved] == [(gate.id, "approved")]
        assert not await one.gates.waiting_on("r1")
        with pytest.raises(ConflictError):
            await one.gates.resolve(gate.id, "denied", "", 3.0)


async def test_a_write_here_after_one_there_leaves_neither_out(postgres_url: str) -> None:
    async with two_hosts(postgres_url) as (one, two):
        there = await two.gates.file("ada", "filed there", 1.0, None, "r1")
        here = await one.gates.file("ada", "filed here", 2.0, None, "r2")
        assert [g.id for g in (await one.gates.briefing_for("ada", None)).open(None)] == [
            there.id,
            here.id,
        ]
        assert await one.gates.waiting_on("r1")
        note_there = await two.memory.add("ada", "noted there", None, 1.0)
        assert len(await one.memory.view("ada")) == 1
        note_there_too = await two.memory.add("ada", "noted there too", None, 2.0)
        note_here = await one.memory.add("ada", "noted here", None, 3.0)
        assert await one.memory.items("ada") == (note_there, note_there_too, note_here)


async def test_a_run_another_host_wrote_to_is_stale_until_reopened(postgres_url: str) -> None:
    info = RunInfo(id="s-1", surface="session", worker="ada", channel="c", created_at=1.0)
    entry = TranscriptEntry(turn=1, role="user", content="hi", at=2.0)
    async with PostgresState(postgres_url) as here, PostgresState(postgres_url) as there:
        mine = await here.runs.create(info)
        assert not await mine.stale()
        await mine.record(entry)
        assert not await mine.stale()  # its own writes keep it current
        theirs, entries = await there.runs.reopen(info)
        assert entries == [entry]
        await theirs.record(replace(entry, turn=2))
        assert await mine.stale()
        mine, entries = await here.runs.reopen(info)
        assert not await mine.stale()
        await theirs.finish("closed", 3.0)
        assert await mine.stale()


async def test_a_prefix_put_on_one_host_is_what_the_other_gets(postgres_url: str) -> None:
    async with two_hosts(postgres_url) as (one, two):
        await one.prefixes.put("ada", "c", _prefix("run-1", 1.0))
        assert await two.prefixes.get("ada", "c") == _prefix("run-1", 1.0)
        await two.prefixes.put("ada", "c", _prefix("run-2", 2.0, sha="b" * 64))
        assert await one.prefixes.get("ada", "c") == _prefix("run-2", 2.0, sha="b" * 64)
        # A later turn of the same session, on the host that serves it.
        await one.prefixes.put("ada", "c", _prefix("run-2", 3.0, sha="b" * 64))
        assert await one.prefixes.get("ada", "c") == _prefix("run-2", 3.0, sha="b" * 64)


async def test_two_hosts_adding_and_posting_at_once_get_distinct_numbers(
    postgres_url: str,
) -> None:
    async with two_hosts(postgres_url) as hosts:
        async with anyio.create_task_group() as tg:
            for n in range(10):
                for host in hosts:
                    tg.start_soon(host.memory.add, "ada", f"note {n}", None, float(n))
                    tg.start_soon(host.channels.post_many, "c", [("ada", f"post {n}", 1.0)])
                    tg.start_soon(host.gates.file, "ada", f"gate {n}", float(n), None, None)
        for host in hosts:
            items = await host.memory.items("ada")
            assert [item.id for item in items] == [f"m-{n}" for n in range(1, 21)]
            assert len(await host.memory.view("ada")) == 20
            assert [m.seq for m in await host.channels.recent("c", 50)] == list(range(1, 21))
            assert len(list((await host.gates.briefing_for("ada", None)).open(None))) == 20
        assert await hosts[0].memory.items("ada") == await hosts[1].memory.items("ada")


_HOST_OPS = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.sampled_from(["note", "gate", "resolve", "task", "read"]),
        st.integers(0, 4),
    ),
    max_size=14,
)
_workers = itertools.count()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@pytest.mark.long
@given(ops=_HOST_OPS)
async def test_two_hosts_agree_with_a_reference_model(
    postgres_url: str, ops: list[tuple[int, str, int]]
) -> None:
    """Notes, gates and tasks (whose changes leave gaps in the gates' change
    numbers) from either host, in any order: each read, on either host, sees
    exactly what both wrote."""
    worker = f"model-{next(_workers)}"  # one per example: they share the database
    runs = [f"{worker}-r{k}" for k in range(3)]
    notes: list[str] = []
    gates: dict[str, tuple[str, float, float | None]] = {}  # id: run, filed, resolved
    async with two_hosts(postgres_url) as hosts:
        for clock, (h, kind, arg) in enumerate(ops, 1):
            host, now = hosts[h], float(clock)
            if kind == "note":
                item = await host.memory.add(worker, f"note {clock}", None, now)
                notes.append(item.id)
                assert item.id == f"m-{len(notes)}"
            elif kind == "gate":
                run = runs[arg % len(runs)]
                gate = await host.gates.file(worker, f"gate {clock}", now, None, run)
                gates[gate.id] = (run, now, None)
            elif kind == "resolve" and gates:
                gate_id = sorted(gates)[arg % len(gates)]
                run, filed, resolved = gates[gate_id]
                if resolved is not None:
                    with pytest.raises(ConflictError):
                        await host.gates.resolve(gate_id, "yes", "", now)
                else:
                    await host.gates.resolve(gate_id, "yes", "", now)
                    gates[gate_id] = (run, filed, now)
            elif kind == "task":
                await host.tasks.submit(worker, "c", f"task {clock}", now)
            elif kind == "read":
                since = None if arg == 0 else now - arg
                view = await host.gates.briefing_for(worker, since)
                still_open = sorted(
                    (g for g, v in gates.items() if v[2] is None), key=lambda g: (gates[g][1], g)
                )
                assert [g.id for g in view.open(None)] == still_open
                shown = [
                    g
                    for g, v in gates.items()
                    if v[2] is not None and since is not None and v[2] > since
                ]
                assert [g.id for g in view.resolved] == sorted(
                    shown, key=lambda g: gates[g][2] or 0.0
                )
                for run in runs:
                    waiting = any(v[0] == run and v[2] is None for v in gates.values())
                    assert await host.gates.waiting_on(run) == waiting
                assert [item.id for item in await host.memory.items(worker)] == notes
                assert len(await host.memory.view(worker)) == len(notes)


# PostgreSQL: records as the file backend writes them


async def _records(url: str, query: LiteralString) -> list[str]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute(query)
        return [str(record) for (record,) in await cursor.fetchall()]


async def test_rows_hold_the_exact_lines_the_file_backend_writes(
    postgres_url: str, tmp_path: Path
) -> None:
    async def write(state: State) -> None:
        await state.channels.post_many("c", [("ada", 'h\u00e9 "quoted"', 1.5)], run="r1")
        await state.memory.add("ada", "likes tea", "c", 2.25)
        gate = await state.gates.file("ada", "ship it?", 3.0, "c", "r1")
        await state.gates.resolve(gate.id, "approved", "note", 4.0)
        task = await state.tasks.submit("ada", "c", "write it", 5.0)
        await state.tasks.update(replace(task, status="running", runs=("r1",)))
        await state.prefixes.put("ada", "c", _prefix("r1", 6.0))

    async with FileState(tmp_path / "state") as files, PostgresState(postgres_url) as db:
        await write(files)
        await write(db)

    def last_line(path: Path) -> str:
        return path.read_text(encoding="utf-8").splitlines()[-1]

    root = tmp_path / "state"
    assert await _records(postgres_url, "SELECT record FROM channel_messages") == [
        last_line(root / "channels" / "c.jsonl")
    ]
    assert await _records(postgres_url, "SELECT record FROM memory_notes") == [
        last_line(root / "memory" / "ada.jsonl")
    ]
    assert await _records(postgres_url, "SELECT record FROM gates") == [
        last_line(root / "gates.jsonl")
    ]
    assert await _records(postgres_url, "SELECT record FROM tasks") == [
        last_line(root / "tasks.jsonl")
    ]
    assert await _records(postgres_url, "SELECT record FROM prefixes") == [
        (root / "prefixes" / "ada" / "c.json").read_text(encoding="utf-8")
    ]


async def test_a_record_damaged_by_hand_is_a_storage_error(postgres_url: str) -> None:
    async with PostgresState(postgres_url) as state:
        await state.memory.add("ada", "likes tea", None, 1.0)
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
            await conn.execute("UPDATE memory_notes SET record = '{\"id\": 1}'")
        with pytest.raises(StorageError) as caught:
            await state.memory.items("ada")
        assert caught.value.op == "decode"


# PostgreSQL: a database that cannot be reached


async def test_a_database_that_cannot_be_reached_fails_to_open_without_its_password() -> None:
    url = "postgresql://rosterd:hunter2@127.0.0.1:1/rosterd"
    with pytest.raises(StorageError) as caught:
        async with PostgresState(url, timeout=1.0):
            pass
    assert caught.value.path == "postgresql://rosterd:***@127.0.0.1:1/rosterd"
    assert caught.value.op == "open"
    assert "hunter2" not in str(caught.value)


async def test_a_database_that_goes_away_fails_each_request_without_its_password() -> None:
    server = await anyio.to_thread.run_sync(PostgresServer.start)
    try:
        name = server.create_database()
        # Trust authentication takes the password and ignores it.
        url = server.url(name).replace("postgresql://postgres@", "postgresql://postgres:hunter2@")
        state = PostgresState(url, timeout=0.5)
        async with state:
            await state.channels.post_many("c", [("ada", "hi", 1.0)])
            await anyio.to_thread.run_sync(server.stop)
            requests: list[Callable[[], Awaitable[object]]] = [
                lambda: state.channels.post_many("c", [("ada", "again", 2.0)]),
                lambda: state.channels.recent("c", 5),
                lambda: state.memory.view("ada"),
                lambda: state.gates.briefing_for("ada", None),
                lambda: state.tasks.claim("host-a", 3.0, 33.0),
            ]
            for request in requests:
                with pytest.raises(StorageError) as caught:
                    await request()
                assert caught.value.path == state.where
                assert "hunter2" not in str(caught.value)
                assert "***" in caught.value.path
    finally:
        await anyio.to_thread.run_sync(server.stop)


# Memory ranking: the same notes and message rank alike on every backend
_NOTE_WORDS = (
    "deploy",
    "deploys",
    "Deployed",
    "the",
    "and",
    "cache",
    "naïve",
    "2026",
    "🚀",
    "発表会",
    "ok",
)
_RANKED_NOTES = st.lists(
    st.tuples(
        st.lists(st.sampled_from(_NOTE_WORDS), min_size=1, max_size=8).map(" ".join),
        st.sampled_from([None, "ops"]),
    ),
    min_size=1,
    max_size=12,
)
_worker_names = (f"ranked{n}" for n in itertools.count())


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    notes=_RANKED_NOTES, message=st.lists(st.sampled_from(_NOTE_WORDS), max_size=5).map(" ".join)
)
async def test_memory_ranks_alike_on_every_backend_and_after_a_restart(
    state: State, notes: list[tuple[str, str | None]], message: str
) -> None:
    worker = next(_worker_names)  # one per example: they share the state
    written = [
        await state.memory.add(worker, text, channel, 1_000.0 + n // 3)
        for n, (text, channel) in enumerate(notes)
    ]
    expected = [
        (r.item.id, r.score) for r in MemoryIndex(written).snapshot().ranking(message, "ops")
    ]
    view = await state.memory.view(worker)
    assert [(r.item.id, r.score) for r in view.ranking(message, "ops")] == expected
    # Total: every note once; by score, then newest, then id.
    assert sorted(i for i, _ in expected) == sorted(n.id for n in written)


async def test_memory_ranks_alike_after_a_restart(state: State) -> None:
    rng = random.Random(11)
    for n in range(300):
        text = " ".join(rng.choices(_NOTE_WORDS, k=rng.randint(1, 9)))
        await state.memory.add("ada", text, rng.choice([None, "ops", "dev"]), 1_000.0 + n // 4)
    await state.memory.retire("ada", Retirement(note="m-7", because="stale", at=9_000.0))
    messages = ["", "the and", "deploy cache", "naïve 🚀 発表", "2026 deploys ok"]
    before = await state.memory.view("ada")
    expected = [[(r.item.id, r.score) for r in before.ranking(m, "ops")] for m in messages]
    async with reopened(state) as again:
        view = await again.memory.view("ada")
        assert [
            [(r.item.id, r.score) for r in view.ranking(m, "ops")] for m in messages
        ] == expected
