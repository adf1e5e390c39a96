"""The real daemon's lifetime: sd_notify, watchdog, socket activation, its socket file."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from harness import DaemonProcess
from orgs import simulated_engine, write_org
from simulator import Held, Simulator


def datagrams(sock: socket.socket, until: bytes, timeout: float = 20.0) -> list[bytes]:
    received: list[bytes] = []
    deadline = time.monotonic() + timeout
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        received.append(data)
        if until in data:
            return received
    raise AssertionError(f"no {until!r} within {timeout} s; got {received}")


@pytest.mark.anyio
async def test_ready_after_the_socket_is_bound_then_watchdog_and_stopping(
    org_dir: Path, tmp_path: Path
) -> None:
    notify_path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(notify_path))
        env = {"NOTIFY_SOCKET": str(notify_path), "WATCHDOG_USEC": "200000"}
        process = DaemonProcess(org_dir, tmp_path / "state", env=env).start(wait=False)
        ready = datagrams(notify, b"READY=1")
        # READY=1 is sent only once the socket accepts connections.
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(process.socket))
        watchdog = datagrams(notify, b"WATCHDOG=1")
        assert process.process is not None
        process.process.send_signal(signal.SIGTERM)
        stopping = datagrams(notify, b"STOPPING=1")
        assert process.process.wait(30) == 0
    assert ready[-1].startswith(b"READY=1")
    assert watchdog[-1].strip() == b"WATCHDOG=1"
    assert stopping[-1].startswith(b"STOPPING=1")


@pytest.mark.anyio
async def test_socket_activation_serves_on_the_inherited_socket(
    org_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "activated.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    process = DaemonProcess(org_dir, tmp_path / "state", socket_path=path)
    inner = shlex.join(process.command())
    fd = listener.fileno()
    wrapper = f"exec 3<&{fd}; export LISTEN_PID=$$ LISTEN_FDS=1; exec {inner}"
    process.command = lambda: ["bash", "-c", wrapper]  # type: ignore[method-assign]
    process.start(pass_fds=(fd,))
    listener.close()
    try:
        async with await process.client() as client:
            status = await client.daemon_status()
        assert "ready on fd 3" in process.log()
        assert process.process is not None
        assert status.pid == process.process.pid
    finally:
        assert process.stop() == 0
    # The socket belongs to systemd: the daemon must not remove it.
    assert path.exists()


@pytest.mark.anyio
async def test_a_notify_socket_that_takes_no_more_datagrams_does_not_hold_up_sigterm(
    org_dir: Path, tmp_path: Path
) -> None:
    notify_path = tmp_path / "notify.sock"
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as filler,
    ):
        notify.bind(str(notify_path))
        env = {"NOTIFY_SOCKET": str(notify_path)}
        process = DaemonProcess(org_dir, tmp_path / "state", env=env).start(wait=False)
        datagrams(notify, b"READY=1")
        # What a service manager too busy to read leaves: a full queue, so
        # the daemon's STOPPING=1 finds no room.
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                filler.sendto(b"STATUS=filler\n", str(notify_path))
        try:
            assert process.stop(timeout=20) == 0
        finally:
            process.stop(signal.SIGKILL)
    assert "cannot notify systemd" in process.log()


@pytest.mark.anyio
async def test_a_draining_daemon_leaves_the_socket_of_the_daemon_that_took_its_path(
    tmp_path: Path, simulator: Simulator
) -> None:
    org = write_org(tmp_path / "org", workers=["ada"], engine=simulated_engine(simulator))
    path = tmp_path / "rosterd.sock"
    old = DaemonProcess(org, tmp_path / "old", socket_path=path).start()
    simulator.script(Held())
    async with await old.client() as held, anyio.create_task_group() as tg:
        tg.start_soon(held.run_direct, "ada", "hi")
        await simulator.wait_for_requests(1)
        assert old.process is not None
        old.process.send_signal(signal.SIGTERM)
        await anyio.to_thread.run_sync(old.wait_notified, b"STOPPING=1")
        # The old one no longer accepts, so its successor may take the path.
        new = DaemonProcess(org, tmp_path / "new", socket_path=path).start()
        simulator.release()
    try:
        assert old.wait() == 0, old.log()
        async with await new.client() as client:
            status = await client.daemon_status()
        assert new.process is not None
        assert status.pid == new.process.pid
    finally:
        assert new.stop() == 0, new.log()
    assert not path.exists()


NOTES = "an operator's notes\n"


@pytest.mark.parametrize(
    ("socket_name", "org_toml", "fails_with"),
    [
        ("notes", "", "{socket}: cannot listen: a file that is not a socket is in the way"),
        ("long" * 30 + ".sock", "", "{socket}: cannot listen: AF_UNIX path too long"),
        (
            "rosterd.sock",
            '[inspect]\nlisten = "127.0.0.1:0"\ntoken_file = "missing"',
            "[inspect] token_file {org}/missing: No such file or directory",
        ),
        (
            "rosterd.sock",
            '[inspect]\nlisten = "{taken}"',
            "the inspector cannot listen on {taken}: Address already in use",
        ),
    ],
)
def test_what_it_cannot_start_fails_start_with_one_clear_line(
    org_dir: Path, tmp_path: Path, socket_name: str, org_toml: str, fails_with: str
) -> None:
    (tmp_path / "notes").write_text(NOTES)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        names = {
            "socket": tmp_path / socket_name,
            "org": org_dir,
            "taken": f"127.0.0.1:{taken.getsockname()[1]}",
        }
        with open(org_dir / "org.toml", "a") as toml:
            toml.write(f"\n{org_toml.format(**names)}\n")
        process = DaemonProcess(org_dir, tmp_path / "state", socket_path=tmp_path / socket_name)
        assert process.start(wait=False).wait(20) == 1
    assert f"roster: {fails_with.format(**names)}\n" in process.log()
    assert "Traceback" not in process.log()
    # The file in the socket's place is never taken for a stale socket and removed.
    assert (tmp_path / "notes").read_text() == NOTES
    assert not (tmp_path / "rosterd.sock").exists()


def test_a_state_path_that_is_a_file_fails_start_in_one_line(org_dir: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.write_text(NOTES)
    process = DaemonProcess(org_dir, notes, socket_path=tmp_path / "rosterd.sock")
    assert process.start(wait=False).wait(20) == 1
    assert f"roster: {notes}: not a directory for the state\n" in process.log()
    assert notes.read_text() == NOTES


def test_a_live_socket_too_busy_to_answer_is_not_taken_for_a_stale_one(
    org_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "busy.sock"
    with socket.socket(socket.AF_UNIX) as busy:
        busy.bind(str(path))
        busy.listen(0)
        before = os.lstat(path).st_ino
        with socket.socket(socket.AF_UNIX) as queued:
            # Accepted by no one: the listener's backlog is full now.
            queued.connect(str(path))
            process = DaemonProcess(org_dir, tmp_path / "state", socket_path=path)
            assert process.start(wait=False).wait(20) == 1, process.log()
        assert f"roster: {path}: another daemon is already listening" in process.log()
        assert os.lstat(path).st_ino == before


@contextlib.contextmanager
def held_at_start(org_dir: Path, tmp_path: Path) -> Iterator[tuple[DaemonProcess, str]]:
    """A daemon process whose start-up waits on a database that took its
    connection and says nothing until the block ends, then hangs up."""
    with socket.create_server(("127.0.0.1", 0)) as database:
        url = f"postgresql://rosterd@127.0.0.1:{database.getsockname()[1]}/roster"
        process = DaemonProcess(org_dir, tmp_path / "state", database=url).start(wait=False)
        connection, _ = database.accept()
        with connection:
            yield process, url


def test_sighup_while_it_starts_is_not_its_end(org_dir: Path, tmp_path: Path) -> None:
    with held_at_start(org_dir, tmp_path) as (process, url):
        assert process.process is not None
        process.process.send_signal(signal.SIGHUP)
    # Its end is the database hanging up (a death by SIGHUP systemd would not restart).
    assert process.wait(20) == 1, process.log()
    # One line, though libpq's message of a hung-up server runs over three.
    error = process.log().split(f"roster: {url}: ", 1)[1]
    assert error.count("\n") == 1 and error.endswith("before or while processing the request.\n")


def test_sigterm_while_it_starts_ends_the_start_at_once(org_dir: Path, tmp_path: Path) -> None:
    with held_at_start(org_dir, tmp_path) as (process, _):
        assert process.process is not None
        process.process.send_signal(signal.SIGTERM)
        # Not waiting for the database, which has not answered yet.
        assert process.wait(20) == 0, process.log()
    assert "SIGTERM while starting: not starting" in process.log()


@pytest.mark.anyio
async def test_two_daemons_starting_at_once_on_one_socket_path_leave_one_serving(
    org_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "rosterd.sock"
    daemons = [DaemonProcess(org_dir, tmp_path / name, socket_path=path) for name in "ab"]
    with contextlib.ExitStack() as stopped, anyio.fail_after(60):
        lock = os.open(tmp_path / "rosterd.sock.lock", os.O_RDWR | os.O_CREAT)
        try:
            # Held here, the lock keeps both at the step where, without it, each
            # finds the path free and the later bind removes the earlier socket.
            fcntl.flock(lock, fcntl.LOCK_EX)
            for daemon in daemons:
                stopped.enter_context(daemon.start(wait=False))
                await daemon.logged("another daemon is starting on this socket")
        finally:
            os.close(lock)
        outcomes = [await d.logged("ready on", "already listening") for d in daemons]
        assert sorted(outcomes) == ["already listening", "ready on"]
        serving, refused = daemons if outcomes[0] == "ready on" else daemons[::-1]
        assert refused.wait(20) == 1
        async with await serving.client() as client:
            status = await client.daemon_status()
        assert serving.process is not None
        assert status.pid == serving.process.pid
