"""A full disk and a loose umask, on a real filesystem.

The ENOSPC case runs the daemon with its state on a 4 MiB tmpfs (tests run
as root); where mounting is not permitted it is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import msgspec
import pytest
from harness import DaemonProcess, wait_task
from simulator import Calls, Reply, Simulator, tool_messages
from test_daemon_remember import forget, make_org, remember, served
from test_stores_runs import entry, session_info, system_record, with_content

from rosterd import StorageError
from rosterd.client import RosterClient, RpcError
from rosterd.compiler import AlreadyShown, ChannelMessage, PrefixState, held_items
from rosterd.protocol import (
    Call,
    ChannelPost,
    GateFile,
    GateState,
    MemoryAdd,
    RunsContext,
    TaskState,
)
from rosterd.stores.files import FileChannels, FileGates, FilePrefixes, FileRuns


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def on_tmpfs(org_dir: Path, tmp_path: Path, tmpfs: Path) -> DaemonProcess:
    """A daemon, not started yet, whose state is on the small tmpfs (its
    socket outside it)."""
    return DaemonProcess(org_dir, tmpfs / "state", socket_path=tmp_path / "rosterd.sock")


def fill(mount: Path, leave: int) -> Path:
    """Fill *mount* until about *leave* bytes are free; returns the filler file."""
    filler = mount / "filler"
    free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(free - leave, 0))
    return filler


@contextlib.contextmanager
def filled(mount: Path, leave: int) -> Iterator[None]:
    """*mount* filled to about *leave* free bytes for the block; the space
    is freed after it."""
    filler = fill(mount, leave)
    try:
        yield
    finally:
        filler.unlink()


@contextlib.contextmanager
def full(mount: Path, leave: int) -> Iterator[pytest.ExceptionInfo[RpcError]]:
    """*mount* filled to about *leave* free bytes for the block, which must
    fail with an ``RpcError``."""
    with filled(mount, leave), pytest.raises(RpcError) as failed:
        yield failed


@pytest.mark.anyio
@pytest.mark.parametrize("leave", [22_000, 30_000, 38_000])
async def test_a_turn_that_hits_a_full_disk_fails_1008_and_leaves_nothing_of_itself(
    on_tmpfs: DaemonProcess, tmpfs: Path, leave: int
) -> None:
    # The turn's trace and user entry are written side by side, and either
    # may be the one that fails: the client hears the storage error itself,
    # the other is cut back, and the next turn takes the turn's number.
    with on_tmpfs.start() as daemon:
        async with await daemon.client() as client:
            session = (await client.session_open("ada", "general")).session
            await client.session_send(session, "first")
            with full(tmpfs, leave) as failed:
                await client.session_send(session, "y" * 20_000)
            after = await client.session_send(session, "after")
        daemon.restart()
        async with await daemon.client() as client:
            assert (await client.session_open("ada", "general")).session == session
            later = await client.session_send(session, "later")
            shown = await client.runs_show(session)
            requests = (await client.request(RunsContext(session, all=True))).turns
        log = daemon.log()
    assert failed.value.code == 1008, failed.value
    assert (after.turn, later.turn) == (2, 3)
    assert [(e.turn, e.role) for e in shown.transcript] == [
        (turn, role) for turn in (1, 2, 3) for role in ("user", "assistant")
    ]
    assert all("yyyy" not in e.content for e in shown.transcript)
    # What the worker saw before the restart is what the request goes on from.
    assert [r.turn for r in requests] == [1, 2, 3]
    for earlier, next_one in itertools.pairwise(requests):
        assert next_one.messages[: len(earlier.messages)] == earlier.messages
    assert "internal error" not in log


@pytest.mark.anyio
async def test_a_turn_the_full_disk_kept_out_of_the_trace_leaves_its_memory_changes_to_the_next(
    on_tmpfs: DaemonProcess, tmpfs: Path
) -> None:
    # A session's memory block says what changed since its previous record.
    # The record of a turn that hit the full disk is not there, so the turn
    # that goes on says what that one would have: the note turn 2 sent.
    with on_tmpfs.start() as daemon:
        async with await daemon.client() as client:
            for n in range(3):
                await client.memory_add("ada", f"pager note {n}")
            session = (await client.session_open("ada", "general")).session
            await client.session_send(session, "first")
            late = await client.memory_add("ada", "pager moved to v2")
            await client.session_send(session, "second")
            with full(tmpfs, 30_000) as failed:
                await client.session_send(session, "y" * 20_000)
            after = await client.session_send(session, "after")
            records = [r for r in (await client.runs_show(session)).records if r.kind == "turn"]
    assert failed.value.code == 1008, failed.value
    assert [r.turn for r in records] == [1, 2, after.turn] == [1, 2, 3]
    memory = [next(b for b in r.blocks if b.block == "memory") for r in records]
    assert memory[2].newly_held == (AlreadyShown(late.id, 2),)
    folded: dict[str, int] | None = None
    for block in memory:
        folded = held_items(folded, block)
    assert folded == {"m-1": 1, "m-2": 1, "m-3": 1, late.id: 2}


@pytest.mark.anyio
@pytest.mark.parametrize("too_big", ["trace", "user turn"])
async def test_a_first_write_that_fails_in_one_file_keeps_nothing_in_the_other(
    tmpfs: Path, too_big: str
) -> None:
    runs = FileRuns(tmpfs / "state")
    record, _ = system_record("s-1")
    run = await runs.create(session_info("s-1"))
    await run.append(with_content(record, 1, "one"), [entry(1, "user", "one")])
    directory = tmpfs / "state" / "runs" / "s-1"
    names = ("context.jsonl", "transcript.jsonl")
    before = [(directory / name).read_bytes() for name in names]
    # Whichever lands first, the other never fits.
    big = "y" * 200_000
    trace, user = (big, "two") if too_big == "trace" else ("two", big)
    with filled(tmpfs, 100_000), pytest.raises(StorageError):
        await run.append(with_content(record, 2, trace), [entry(2, "user", user)])
    assert [(directory / name).read_bytes() for name in names] == before
    assert run.last_turn == 1
    await run.append(with_content(record, 2, "two"), [entry(2, "user", "two")])
    await run.aclose()
    assert [r.turn for r in await runs.context("s-1")] == [1, 2]
    assert [e.content for e in await runs.transcript("s-1")] == ["one", "two"]


@pytest.mark.anyio
async def test_a_put_that_fails_while_another_is_in_flight_never_hands_its_id_out_twice(
    tmpfs: Path,
) -> None:
    gates = await FileGates.open(tmpfs / "gates.jsonl")
    outcomes: dict[str, GateState | StorageError] = {}

    async def file(name: str, summary: str) -> None:
        try:
            outcomes[name] = await gates.file("ada", summary, 2.0, None, None)
        except StorageError as exc:
            outcomes[name] = exc

    try:
        first = await gates.file("ada", "first", 1.0, None, None)
        filler = fill(tmpfs, 40_000)
        async with anyio.create_task_group() as tg:
            tg.start_soon(file, "big", "y" * 60_000)  # takes its id, then fails to append
            tg.start_soon(file, "small", "x")  # takes its id while the big one is in flight
        filler.unlink()
        after = await gates.file("ada", "after", 3.0, None, None)
    finally:
        await gates.aclose()
    small = outcomes["small"]
    assert isinstance(outcomes["big"], StorageError) and isinstance(small, GateState)
    assert len({first.id, small.id, after.id}) == 3
    reopened = await FileGates.open(tmpfs / "gates.jsonl")
    try:
        stored = {g.id: g.summary for g in await reopened.all()}
        again = await reopened.file("ada", "again", 4.0, None, None)
    finally:
        await reopened.aclose()
    assert stored == {first.id: "first", small.id: "x", after.id: "after"}
    assert again.id not in stored


async def chattr(flag: str, path: Path) -> None:
    try:
        done = await anyio.run_process(["chattr", flag, str(path)], check=False)
    except OSError as exc:
        pytest.skip(f"chattr not available: {exc}")
    if done.returncode != 0:
        pytest.skip(f"chattr {flag} not supported here: {done.stderr.decode().strip()}")


@contextlib.asynccontextmanager
async def immutable(path: Path) -> AsyncIterator[None]:
    """*path* made immutable (``chattr +i``) for the block: nothing in it
    can be written, created or removed."""
    await chattr("+i", path)
    try:
        yield
    finally:
        await chattr("-i", path)


@pytest.mark.anyio
async def test_a_log_whose_cut_back_fails_refuses_every_later_append_and_restart_says_why(
    on_tmpfs: DaemonProcess, tmpfs: Path
) -> None:
    daemon = on_tmpfs
    gates = tmpfs / "state" / "gates.jsonl"
    daemon.start()
    try:
        async with await daemon.client() as client:
            first = await client.gate_file("ada", "first")
            # Append-only (chattr +a): writes go on, but the cut back is EPERM.
            await chattr("+a", gates)
            filler = fill(tmpfs, 40_000)
            with pytest.raises(RpcError) as failed:
                await client.gate_file("ada", "y" * 60_000)
            filler.unlink()
            with pytest.raises(RpcError) as stopped:
                await client.gate_file("ada", "x")
            # Only that log stopped: other state is still written.
            note = await client.memory_add("ada", "still works")
        assert daemon.stop() == 0
        assert (failed.value.code, failed.value.data["op"]) == (1008, "append")
        assert stopped.value.code == 1008
        assert stopped.value.data == {"op": "truncate after failed append", "errno": 1}
        assert "gates.jsonl: stopped taking appends" in daemon.log()
        assert not gates.read_bytes().endswith(b"\n")  # the failed append's bytes are there

        # Recovery must cut that torn tail and cannot: a clear error, no traceback.
        daemon.start(wait=False)
        assert daemon.process is not None
        assert await anyio.to_thread.run_sync(daemon.process.wait, 20) == 1
        assert "gates.jsonl: truncate a torn tail failed: Operation not permitted" in daemon.log()
        assert "Traceback" not in daemon.log()

        await chattr("-a", gates)
        daemon.start()
        async with await daemon.client() as client:
            listed = {g.id: g.summary for g in await client.gate_list()}
            notes = await client.memory_list("ada")
    finally:
        with contextlib.suppress(OSError):  # leave the file removable
            await anyio.run_process(["chattr", "-a", str(gates)], check=False)
        daemon.stop()
    assert listed == {first.id: "first"}
    assert note in notes
    assert gates.read_bytes().endswith(b"\n")


@pytest.mark.anyio
async def test_state_is_private_whatever_the_umask_even_in_a_loose_existing_dir(
    org_dir: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o755)  # as `mkdir -p .state` leaves it
    old = os.umask(0)  # the daemon inherits it
    try:
        daemon = DaemonProcess(org_dir, state, socket_path=tmp_path / "rosterd.sock").start()
    finally:
        os.umask(old)
    try:
        async with await daemon.client() as client:
            await client.gate_file("ada", "s")
            await client.memory_add("ada", "note")
            opened = await client.session_open("ada", "general")
            await client.session_send(opened.session, "hi")
    finally:
        daemon.stop()
    loose = []
    for path in [state, *state.rglob("*")]:
        if path.is_socket() or path.is_symlink():
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            loose.append(f"{path.relative_to(tmp_path)}: {oct(mode)}")
    assert loose == []


# Each method with a text field of its own limit: its params, given that text.
# (The client does not check limits; the daemon's decoder does.)
LIMITS: list[tuple[Callable[[str], Call[Any]], int]] = [
    (lambda text: MemoryAdd("ada", text), 64 * 1024),
    (lambda text: ChannelPost("general", "bo", text), 256 * 1024),
    (lambda text: GateFile("ada", text), 64 * 1024),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("params", "limit"), LIMITS, ids=["memory.add", "channel.post", "gate.file"]
)
async def test_an_input_over_its_size_limit_gets_32602_naming_the_limit_and_is_not_stored(
    daemon: DaemonProcess, params: Callable[[str], Call[Any]], limit: int
) -> None:
    async with await daemon.client() as client:
        with pytest.raises(RpcError) as over:
            await client.request(params("w" * (limit + 1)))
        assert over.value.code == -32602
        assert str(limit) in over.value.message
        await client.request(params("w" * limit))
    for path in daemon.state.rglob("*.jsonl"):
        assert b"w" * (limit + 1) not in path.read_bytes()


@pytest.mark.anyio
async def test_a_gate_note_over_its_limit_gets_32602(daemon: DaemonProcess) -> None:
    async with await daemon.client() as client:
        gate = await client.gate_file("ada", "ok?")
        with pytest.raises(RpcError) as over:
            await client.gate_resolve(gate.id, "approved", "n" * 65537)
        assert over.value.code == -32602
        assert "65536" in over.value.message
        (listed,) = await client.gate_list()
    assert listed.id == gate.id
    assert listed.outcome is None


@pytest.mark.anyio
async def test_the_channel_tail_in_memory_is_bounded_in_characters(tmp_path: Path) -> None:
    big = "z" * 256 * 1024
    store = FileChannels(tmp_path / "channels")
    try:
        for n in range(40):
            await store.post_many("general", [("bo", big, float(n))])
        kept = await store.recent("general", 1000)
    finally:
        await store.aclose()
    assert sum(len(m.text) for m in kept) <= 4 * 1024 * 1024
    assert kept[-1].seq == 40
    reopened = FileChannels(tmp_path / "channels")
    try:
        after = await reopened.recent("general", 1000)
    finally:
        await reopened.aclose()
    assert sum(len(m.text) for m in after) <= 4 * 1024 * 1024
    assert [m.seq for m in after] == [m.seq for m in kept]


@pytest.mark.anyio
async def test_a_channel_log_torn_anywhere_keeps_its_whole_lines_read_back_from_its_end(
    tmp_path: Path,
) -> None:
    # Lines of up to 40 KB: its tail is read back across several chunks.
    lines = [
        msgspec.json.encode(ChannelMessage(seq=n, sender="bo", text="é" * 8_000 * n, at=n)) + b"\n"
        for n in range(1, 6)
    ]
    log = b"".join(lines)
    ends = list(itertools.accumulate(map(len, lines)))
    tears = {0, *range(0, len(log), 4_093)} | {e + d for e in ends for d in (-2, -1, 1, 2)}
    for size in sorted(t for t in tears if t <= len(log)):
        root = tmp_path / str(size)
        root.mkdir()
        (root / "general.jsonl").write_bytes(log[:size])
        kept = log[:size].count(b"\n")
        store = FileChannels(root)
        try:
            held = await store.recent("general", 10)
            (posted,) = await store.post_many("general", [("al", "after", 9.0)])
        finally:
            await store.aclose()
        assert [m.seq for m in held] == list(range(1, kept + 1))
        assert posted.seq == kept + 1
        after = b"".join(lines[:kept]) + msgspec.json.encode(posted) + b"\n"
        assert (root / "general.jsonl").read_bytes() == after


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["gate", "memory note"])
async def test_a_record_that_hits_a_full_disk_fails_1008_and_its_number_is_never_handed_out(
    on_tmpfs: DaemonProcess, tmpfs: Path, kind: str
) -> None:
    # Under the size limit, over the free space: the failed record is cut
    # back, its number stays unused, the next one (acknowledged) takes the
    # one after it, and a restart counts on from there too.
    async def add(client: RosterClient, text: str) -> str:
        if kind == "gate":
            return (await client.gate_file("ada", text)).id
        return (await client.memory_add("ada", text)).id

    async def listed(client: RosterClient) -> dict[str, str]:
        if kind == "gate":
            return {g.id: g.summary for g in await client.gate_list()}
        return {n.id: n.text for n in await client.memory_list("ada", every=True)}

    with on_tmpfs.start() as daemon:
        async with await daemon.client() as client:
            first = await add(client, "first")
            with full(tmpfs, 40_000) as failed:
                await add(client, "y" * 60_000)
            acked = await add(client, "acked")
        daemon.restart()
        async with await daemon.client() as client:
            after = await add(client, "after")
            records = await listed(client)
    assert failed.value.code == 1008
    assert records == {first: "first", acked: "acked", after: "after"}
    assert all(b"yyyy" not in log.read_bytes() for log in (tmpfs / "state").rglob("*.jsonl"))


async def _done_and_a_gate_filer(
    client: RosterClient,
) -> tuple[TaskState, Callable[[], Awaitable[GateState]]]:
    """A task of ada's in #releases, done, whose state (its text and reply)
    is too big for a disk a gate's small write still fits on; and a call
    that files a gate against its run."""
    task = await client.task_submit("ada", "releases", "z" * 20_000)
    done = await wait_task(client, task.id, "done")
    return done, partial(client.gate_file, "ada", "sign-off?", channel="releases", run=done.runs[0])


def _assert_continued(task: TaskState, gate: str) -> None:
    """*task* ran again, continued with *gate*'s approval."""
    assert len(task.runs) == 2
    assert task.continuation is not None
    assert (task.continuation.gate, task.continuation.outcome) == (gate, "approved")


@pytest.mark.anyio
async def test_a_gate_whose_task_pause_fails_is_filed_once_and_its_resolution_continues_the_task(
    on_tmpfs: DaemonProcess, tmpfs: Path
) -> None:
    # The gate's write is small and lands; its task's pause (the task's text
    # and reply) does not fit. The gate is durable, so the filing stands and
    # is answered as such: a 1008 would send the client filing a second
    # gate. Resolving it continues the task, whose pause was never written.
    with on_tmpfs.start() as daemon:
        async with await daemon.client() as client:
            done, file = await _done_and_a_gate_filer(client)
            with filled(tmpfs, 16_000):
                gate = await file()
            listed = await client.gate_list()
            await client.gate_resolve(gate.id, "approved", note="go")
            finished = await wait_task(client, done.id, "done")
        log = daemon.log()
    assert listed == [gate]
    assert f"gate {gate.id}: its task (run {done.runs[0]}) is not moved yet" in log
    _assert_continued(finished, gate.id)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("failing", "moved"), [("gate.file", ("done", "paused")), ("gate.resolve", ("paused", "done"))]
)
async def test_a_task_whose_gate_write_stands_is_moved_once_the_disk_has_room_again(
    on_tmpfs: DaemonProcess, tmpfs: Path, failing: str, moved: tuple[str, str]
) -> None:
    # The gate's write lands, its task's new state does not fit: the call
    # is answered with the gate, and the running daemon puts the task where
    # the gate says at its next look for work after the disk has room, not
    # only at its next start.
    with on_tmpfs.start() as daemon:
        async with await daemon.client() as client:
            task, file = await _done_and_a_gate_filer(client)
            gate = await file() if failing == "gate.resolve" else None
            with filled(tmpfs, 16_000):
                if gate is None:
                    gate = await file()
                else:
                    gate = await client.gate_resolve(gate.id, "approved", note="go")
                before = await client.task_get(task.id)
            await daemon.logged(f"gate {gate.id}: its task is where the gate says now")
            after = await wait_task(client, task.id, moved[1])
    assert (before.status, after.status) == moved
    if failing == "gate.resolve":
        assert gate.outcome == "approved"
        _assert_continued(after, gate.id)


@pytest.mark.anyio
@pytest.mark.parametrize("room", ["at the start", "after the start"])
@pytest.mark.parametrize("failing", ["gate.file", "gate.resolve"])
async def test_a_gate_whose_task_write_fails_still_moves_the_task_after_a_kill(
    on_tmpfs: DaemonProcess, tmpfs: Path, failing: str, room: str
) -> None:
    # The gate's write is small and lands; its task's new state (the task's
    # text and reply) does not fit, and the call is answered with the gate.
    # Killed before the disk has room, the daemon leaves what a kill between
    # the two writes leaves: the one that starts next must put the task
    # where its gate says, paused while the gate waits, continued with its
    # outcome once it is resolved; on a disk still full at its start, once
    # the disk has room.
    with on_tmpfs.start() as daemon:
        async with await daemon.client() as client:
            task, file = await _done_and_a_gate_filer(client)
            if failing == "gate.resolve":
                gate = await file()
                assert (await client.task_get(task.id)).status == "paused"
            filler = fill(tmpfs, 16_000)
            try:
                if failing == "gate.file":
                    gate = await file()
                else:
                    await client.gate_resolve(gate.id, "approved", note="go")
            finally:
                daemon.kill9()
        if room == "at the start":
            filler.unlink()
        daemon.start()
        if room == "after the start":
            await daemon.logged("tasks could not be put where their gates say yet")
            filler.unlink()
            await daemon.logged("tasks are where their gates say now")
        async with await daemon.client() as client:
            if failing == "gate.file":
                (gate,) = await client.gate_list()
                assert (await client.task_get(task.id)).status == "paused"
                await client.gate_resolve(gate.id, "approved", note="go")
            (resolved,) = await client.gate_list()
            finished = await wait_task(client, task.id, "done")
    assert resolved.outcome == "approved"
    _assert_continued(finished, gate.id)


@pytest.mark.anyio
async def test_a_prefix_state_whose_write_failed_is_written_by_the_next_put(tmpfs: Path) -> None:
    # Only a changed prefix is written; one whose write failed is still
    # unwritten, and the next put of it must not take it for written.
    prefixes = FilePrefixes(tmpfs)
    first = PrefixState(run="s-1", at=1.0, engine_fingerprint="e", blocks=(), boundaries=())
    await prefixes.put("ada", "general", first)
    second = PrefixState(
        run="s-2", at=2.0, engine_fingerprint="e" * 200_000, blocks=(), boundaries=()
    )
    with filled(tmpfs, 100_000), pytest.raises(StorageError):
        await prefixes.put("ada", "general", second)
    await prefixes.put("ada", "general", msgspec.structs.replace(second, at=3.0))
    assert await FilePrefixes(tmpfs).get("ada", "general") == msgspec.structs.replace(
        second, at=3.0
    )


@pytest.mark.anyio
async def test_a_rollover_cut_short_before_the_old_session_ended_leaves_one_open_session(
    on_tmpfs: DaemonProcess, org_dir: Path
) -> None:
    # The old session's end cannot be written (its directory made immutable):
    # as after a kill between the writes of a rollover, the successor
    # exists and the old session is not ended. Whatever it is answered, the
    # pair has one open session after it, and the old id leads to it.
    toml = org_dir / "org.toml"
    toml.write_text(toml.read_text().replace("[context]\n", "[context]\nsession_chars = 50000\n"))
    daemon = on_tmpfs
    with daemon.start():
        async with await daemon.client() as client:
            old = (await client.session_open("ada", "general")).session
            await client.session_send(old, "a" * 20_000)
            await client.session_send(old, "b" * 20_000)
            old_dir = daemon.state / "runs" / old
            async with immutable(old_dir):
                with pytest.raises(RpcError) as failed:
                    await client.session_send(old, "c" * 20_000)
        daemon.kill9()
        daemon.start()
        async with await daemon.client() as client:
            after = await client.session_send(old, "after")
            current = (await client.session_open("ada", "general")).session
            listed = await client.runs_list()
    assert failed.value.code == 1008
    assert after.run == current
    assert [r.id for r in listed if r.surface == "session" and r.status == "open"] == [current]


@pytest.mark.anyio
async def test_a_close_whose_end_fails_keeps_the_session_open_until_a_close_succeeds(
    on_tmpfs: DaemonProcess,
) -> None:
    # The session's end cannot be written (its directory made immutable):
    # the close is answered 1008 and nothing of it is kept, so it can be
    # tried again, and once it succeeds no restart opens the session again.
    with on_tmpfs.start() as daemon:
        async with await daemon.client() as client:
            session = (await client.session_open("ada", "general")).session
            await client.session_send(session, "hello")
            async with immutable(daemon.state / "runs" / session):
                with pytest.raises(RpcError) as failed:
                    await client.session_close(session)
            still = await client.session_send(session, "still here")
            await client.session_close(session)
        daemon.kill9()
        daemon.start()
        async with await daemon.client() as client:
            with pytest.raises(RpcError) as closed:
                await client.session_send(session, "after")
            opened = await client.session_open("ada", "general")
    assert failed.value.code == 1008
    assert (still.run, still.turn) == (session, 2)
    assert closed.value.code == 1004
    assert opened.session != session


@pytest.mark.anyio
async def test_a_close_whose_pointer_cannot_be_removed_still_closes_the_session(
    on_tmpfs: DaemonProcess,
) -> None:
    # The pair's pointer cannot be removed (its directory made immutable)
    # once the session's end is written: the close stands, and the pointer
    # left to an ended session is replaced by the pair's next open.
    with on_tmpfs.start() as daemon:
        async with await daemon.client() as client:
            session = (await client.session_open("ada", "general")).session
            async with immutable(daemon.state / "sessions" / "ada"):
                closed = await client.session_close(session)
        daemon.kill9()
        daemon.start()
        async with await daemon.client() as client:
            opened = await client.session_open("ada", "general")
            (info,) = [r for r in await client.runs_list() if r.id == session]
    assert closed.closed == session
    assert opened.session != session
    assert info.status == "closed"


@pytest.mark.anyio
async def test_a_session_that_cannot_start_leaves_no_open_session_behind(
    on_tmpfs: DaemonProcess, tmpfs: Path
) -> None:
    # Room for the new session's run.json, not for its frozen system part.
    daemon = on_tmpfs
    with daemon.start():
        async with await daemon.client() as client:
            with full(tmpfs, 2 * 4096 + 100) as failed:
                await client.session_open("ada", "general")
            opened = await client.session_open("ada", "general")
            listed = await client.runs_list()
    assert failed.value.code == 1008
    assert [r.id for r in listed if r.status == "open"] == [opened.session]
    assert [r.status for r in listed if r.id != opened.session] == ["failed"]


@pytest.mark.anyio
async def test_a_memory_write_that_fails_is_answered_as_failed_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    # Only the worker's memory cannot be written (chattr +i on its log and
    # directory): the turn's own trace and transcript still can.
    state = tmp_path / "state"
    memory = state / "memory"
    async with Simulator() as sim:
        org = make_org(tmp_path / "org", sim)
        sim.script(
            Reply("hi"),
            Calls((remember("the deploy key rotates monthly"), forget("m-1"))),
            Reply("I could not save that."),
        )
        async with served(org, state) as client:
            await client.memory_add("w0", "the deploy key never rotates", "c0")
            opened = await client.session_open("w0", "c0")
            await client.session_send(opened.session, "hello")
            async with immutable(memory / "w0.jsonl"), immutable(memory):
                reply = await client.session_send(opened.session, "it rotates monthly now")
        async with served(org, state) as client:
            notes = await client.memory_list("w0", every=True)

    assert reply.text == "I could not save that."
    wrote, retired = tool_messages(sim.requests[2].body)
    assert (wrote["status"], retired["status"]) == ("error", "error")
    assert wrote["text"].startswith("note not saved: ")
    assert retired["text"].startswith("note m-1 not retired: ")
    # The model hears what failed, never where the state lives.
    assert str(state) not in wrote["text"] + retired["text"]
    # Nothing of either write stays, after a restart too.
    assert [(n.id, n.retired) for n in notes] == [("m-1", None)]
    assert b"monthly" not in (memory / "w0.jsonl").read_bytes()


@pytest.mark.anyio
async def test_a_start_on_a_full_disk_serves_though_it_cannot_list_runs_settled(
    on_tmpfs: DaemonProcess, tmpfs: Path
) -> None:
    with on_tmpfs.start() as daemon:
        async with await daemon.client() as client:
            finished = [(await client.run_direct("ada", f"run {n}")).run for n in range(3)]
    # A state from before the list: this start would list every run.
    (tmpfs / "state" / "settled-runs.jsonl").unlink()
    with filled(tmpfs, 0), daemon.start():
        async with await daemon.client() as client:
            listed = [run.id for run in await client.runs_list()]
        await daemon.logged("could not list")
    assert listed == finished
