"""Daemons for tests: real processes (start, stop, kill -9) or in process with a manual clock."""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypedDict, Unpack

import anyio
import anyio.to_thread
import pytest
import watchfiles

from rosterd import SYSTEM_CLOCK, Clock
from rosterd.cli import main
from rosterd.client import RosterClient
from rosterd.daemon import run_daemon
from rosterd.protocol import TaskGet, TaskState
from rosterd.stores import State

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_ORG = REPO / "examples" / "org"
_START = "import sys; from rosterd.cli import main; sys.exit(main(sys.argv[1:]))"


# A stdlib-only script (another uid cannot read this checkout's virtualenv) run with
# ``python3 -c``: opens argv[2] connections to the socket argv[1], each asking
# daemon.status, prints each one's error code (0 when served) as a JSON list, then
# holds them all until stdin closes.
HOLD_CONNECTIONS = """
import json, socket, sys
held, codes = [], []
for _ in range(int(sys.argv[2])):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(sys.argv[1])
    try:
        sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"daemon.status"}\\n')
    except OSError:
        pass  # a refusing daemon may close first; its refusal is still there to read
    data = b""
    try:
        while not data.endswith(b"\\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    reply = json.loads(data) if data else {"error": {"code": -1}}
    codes.append(reply.get("error", {}).get("code", 0))
    held.append(sock)
print(json.dumps(codes), flush=True)
sys.stdin.read()
"""


def run_bench(script: str, *args: str, timeout: float = 110.0) -> str:
    """Run ``bench/<script>`` as its own process; its stdout, once it exited 0."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def copy_org(destination: Path) -> Path:
    shutil.copytree(EXAMPLE_ORG, destination)
    return destination


def set_engine(org: Path, engine: str) -> None:
    """Replace the example org's ``kind = "echo"`` engine with *engine* (TOML lines)."""
    toml = org / "org.toml"
    text = toml.read_text()
    assert 'kind = "echo"' in text, "set_engine expects the example org's echo engine"
    toml.write_text(text.replace('kind = "echo"', engine))


def set_daemon(org: Path, settings: str) -> None:
    """Give the example org's ``[daemon]`` table *settings* (TOML lines),
    each in place of the table's own line for that key where it has one."""
    toml = org / "org.toml"
    head, table, rest = toml.read_text().partition("[daemon]\n")
    assert table, "set_daemon expects the example org's [daemon] table"
    lines = settings.strip().splitlines()
    keys = {line.partition("=")[0].strip() for line in lines}
    body, tables, after = rest.partition("\n[")
    kept = [line for line in body.split("\n") if line.partition("=")[0].strip() not in keys]
    toml.write_text(head + table + "\n".join([*lines, *kept]) + tables + after)


# Every daemon process started, in order: those a test started and left
# running, whatever stopped it early, are killed (``kill_daemons_since``).
_STARTED: list[subprocess.Popen[bytes]] = []


def daemons_started() -> int:
    """A mark for ``kill_daemons_since``."""
    return len(_STARTED)


def kill_daemons_since(mark: int) -> None:
    """Kill the daemon processes started after *mark* that still run."""
    for process in _STARTED[mark:]:
        if process.poll() is None:
            process.kill()
            process.wait()
    del _STARTED[mark:]


class DaemonProcess:
    """``roster serve`` as a child process with its log in a file."""

    def __init__(
        self,
        org: Path,
        state: Path,
        *,
        env: Mapping[str, str] | None = None,
        socket_path: Path | None = None,
        database: str | None = None,
    ) -> None:
        """With *database* (a PostgreSQL URL) the state is there, and *state*
        is only the directory that holds the socket and the log."""
        self.org = org
        self.state = state
        self.database = database
        self.socket = socket_path or state / "rosterd.sock"
        self.log_path = state.parent / f"{state.name}.log"
        if database is not None:
            state.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self._notify: socket.socket | None = None

    def __repr__(self) -> str:
        return f"DaemonProcess({self.state}, pid={self.process.pid if self.process else None})"

    def command(self) -> list[str]:
        return [
            sys.executable, "-c", _START, "serve", "--org", str(self.org),
            "--state", self.database or str(self.state), "--socket", str(self.socket),
            "--log-level", "DEBUG",
        ]  # fmt: skip

    def start(self, *, wait: bool = True, pass_fds: tuple[int, ...] = ()) -> DaemonProcess:
        env = dict(self.env)
        if wait and "NOTIFY_SOCKET" not in env:
            # Readiness is the daemon's own READY=1, as systemd would see it.
            self._close_notify()
            self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            name = f"rosterd-test-{uuid.uuid4().hex}"
            self._notify.bind(f"\0{name}")
            env["NOTIFY_SOCKET"] = f"@{name}"
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it from here
        self.process = subprocess.Popen(
            self.command(), stdout=log, stderr=log, env=env, pass_fds=pass_fds
        )
        log.close()
        _STARTED.append(self.process)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Until the daemon sends READY=1; fails at once if it exits first."""
        self.wait_notified(b"READY=1", timeout)

    def wait_notified(self, field: bytes, timeout: float = 20.0) -> None:
        """Until the daemon sends *field* (``STOPPING=1``, or the start of
        one, ``STATUS=accept failed``) to its notify socket."""
        assert self.process is not None
        assert self._notify is not None, "needs the harness's own notify socket"
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            # The timeout only bounds how late an early exit is noticed.
            readable, _, _ = select.select([self._notify], [], [], min(left, 0.2))
            if readable and any(
                line.startswith(field) for line in self._notify.recv(4096).split(b"\n")
            ):
                return
            if self.process.poll() is not None:
                raise AssertionError(f"daemon exited with {self.process.returncode}:\n{self.log()}")
        raise AssertionError(f"no {field!r} after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    async def logged(self, *texts: str) -> str:
        """Until the daemon's log holds one of *texts*, looked at again at
        each write to the file (watchfiles): the first of them it holds.
        Looked at every 100 ms as well: a write between the first look and
        the watch's start is seen by no watch, and a daemon that then logs
        nothing more would leave the wait to the test's timeout."""
        if found := self._holds(texts):
            return found
        changes = watchfiles.awatch(
            self.log_path, debounce=50, step=10, rust_timeout=100, yield_on_timeout=True
        )
        async for _ in changes:
            if found := self._holds(texts):
                return found
        raise AssertionError(f"the log stopped changing without any of {texts}")

    def _holds(self, texts: Sequence[str]) -> str | None:
        log = self.log()
        return next((text for text in texts if text in log), None)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        """The exit code, once the daemon exited by itself or on a signal sent earlier."""
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            # The test fails here: it must not leave its daemon running.
            self.process.kill()
            self.process.wait()
            raise
        finally:
            self._close_notify()

    def _close_notify(self) -> None:
        if self._notify is not None:
            self._notify.close()
            self._notify = None

    def restart(self) -> DaemonProcess:
        """Stop, draining, with exit status 0, and start again on the same
        state: the new daemon finds what a clean stop left."""
        assert self.stop() == 0, self.log()
        return self.start()

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> DaemonProcess:
        """``with DaemonProcess(...).start() as process:`` stops it at the end."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def client(self) -> RosterClient:
        return await RosterClient.connect(self.socket)


@asynccontextmanager
async def process_client(
    org: Path, state: Path, **options: Any
) -> AsyncIterator[tuple[DaemonProcess, RosterClient]]:
    """``roster serve`` on *org* as a child process (*options* as
    ``DaemonProcess`` takes them) and a client connected to it; at the end of
    the block the client closes and the daemon stops, draining, with exit
    status 0 (a restart after it finds what a clean stop left)."""
    with DaemonProcess(org, state, **options).start() as process:
        async with await process.client() as client:
            yield process, client
        assert process.stop() == 0, process.log()


@asynccontextmanager
async def opened_session(
    daemon: DaemonProcess | InProcessDaemon, worker: str = "ada", channel: str = "general"
) -> AsyncIterator[tuple[RosterClient, str]]:
    """A client of *daemon* and a session it opened of *worker* in *channel*
    (by default the example org's ada in general); the client closes at the
    end of the block."""
    async with await daemon.client() as client:
        yield client, (await client.session_open(worker, channel)).session


async def wait_task(client: RosterClient, task: str, *statuses: str) -> TaskState:
    """*task* once the daemon says it settled (done, failed or paused); its
    status must be one of *statuses*."""
    state = await client.request(TaskGet(task, wait=30))
    assert state.status in statuses, state
    return state


class ManualClock:
    """A wall clock that moves only when the test says so.

    The daemon's loops sleep on it (``Clock.sleep``): ``advance`` wakes each
    one whose time came, and ``settled`` waits until every loop it woke is
    asleep again, its round done.
    """

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now
        # Per sleeping loop: when it wakes, and the event that wakes it.
        self._sleepers: list[tuple[float, anyio.Event]] = []
        self._woken = 0
        self._asleep = anyio.Event()
        # Set, and replaced, each time a loop goes to sleep.
        self._slept = anyio.Event()

    def __repr__(self) -> str:
        return f"ManualClock({self.now}, {len(self._sleepers)} asleep)"

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        wake = anyio.Event()
        self._sleepers.append((self.now + seconds, wake))
        self._slept.set()
        self._slept = anyio.Event()
        if self._woken:
            self._woken -= 1
            if not self._woken:
                self._asleep.set()
        try:
            await wake.wait()
        finally:
            self._sleepers = [s for s in self._sleepers if s[1] is not wake]

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [wake for at, wake in self._sleepers if at <= self.now]
        self._sleepers = [(at, wake) for at, wake in self._sleepers if at > self.now]
        self._woken += len(due)
        if self._woken:
            self._asleep = anyio.Event()
        for wake in due:
            wake.set()

    async def settled(self) -> None:
        """Until every loop ``advance`` woke has done its round and sleeps again."""
        if self._woken:
            await self._asleep.wait()

    async def asleep_until(self, at: float) -> None:
        """Until a loop sleeps on this clock to wake at *at* or sooner: it
        waits for the clock, and nothing else, to go on."""
        while not any(wake_at <= at for wake_at, _ in self._sleepers):
            await self._slept.wait()


class InProcessDaemon:
    """The daemon in the test's own event loop: no process start-up, an injected clock."""

    def __init__(self, org: Path, state: Path, socket_path: Path, records: _Lines) -> None:
        self.org = org
        self.state = state
        self.socket = socket_path
        self._records = records

    def __repr__(self) -> str:
        return f"InProcessDaemon({self.state})"

    async def client(self) -> RosterClient:
        return await RosterClient.connect(self.socket)

    def log(self) -> str:
        """What the daemon logged so far, one line per record, as ``roster serve`` would."""
        return "".join(f"{line}\n" for line in self._records.lines)

    async def logged(self, text: str, times: int = 1) -> None:
        """Until the daemon logs *times* lines holding *text* (from any
        thread), 30 s at most."""
        await self.until_logged(lambda log: log.count(text) >= times, f"{text!r} {times} times")

    async def until_logged(self, holds: Callable[[str], bool], what: str = "it") -> None:
        """Until what the daemon logged so far makes *holds* true, looked at
        as each line comes (from any thread), 30 s at most."""
        found = await anyio.to_thread.run_sync(self._records.wait_for, holds, 30.0)
        assert found, f"the daemon never logged {what}:\n{self.log()}"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        # Threads log too (the span exporter): waiters wake on each line.
        self._added = threading.Condition()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        with self._added:
            self.lines.append(line)
            self._added.notify_all()

    def wait_for(self, holds: Callable[[str], bool], timeout: float) -> bool:
        """Block until the lines, one per line, make *holds* true; whether
        they did within *timeout* s."""
        with self._added:
            return self._added.wait_for(lambda: holds("\n".join(self.lines)), timeout)


@asynccontextmanager
async def daemon_in_process(
    org: Path,
    state: Path,
    *,
    clock: Clock = SYSTEM_CLOCK,
    database: str | None = None,
    stores: AbstractAsyncContextManager[State] | None = None,
) -> AsyncIterator[InProcessDaemon]:
    """Serve *org* until the block ends, then drain and stop as on SIGTERM.

    With *database* (a PostgreSQL URL) the state is there, and *state* is
    only the directory that holds the socket; *stores* opens it (a
    ``PostgresState`` of the test's own making), instead of the daemon."""
    if database is not None:
        await anyio.Path(state).mkdir(parents=True, exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if k not in _SYSTEMD_VARIABLES}
    stop = anyio.Event()
    lines = _Lines()
    logger = logging.getLogger("rosterd")
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    try:
        async with anyio.create_task_group() as tg:
            path = await tg.start(
                partial(
                    run_daemon,
                    org,
                    database or state,
                    state / "rosterd.sock",
                    environ,
                    clock=clock,
                    stop=stop,
                    stores=stores,
                )
            )
            try:
                yield InProcessDaemon(org, state, path, lines)
            finally:
                stop.set()
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


class DaemonOptions(TypedDict, total=False):
    """What ``daemon_in_process`` takes besides the org and the state."""

    clock: Clock
    database: str | None
    stores: AbstractAsyncContextManager[State] | None


@asynccontextmanager
async def in_process_client(
    org: Path, state: Path, **options: Unpack[DaemonOptions]
) -> AsyncIterator[tuple[InProcessDaemon, RosterClient]]:
    """``daemon_in_process`` and a client connected to it, until the block ends."""
    async with daemon_in_process(org, state, **options) as daemon, await daemon.client() as client:
        yield daemon, client


class Cli:
    """``roster`` in process through ``main(argv)``, what it writes captured
    as bytes (the ``cli`` fixture)."""

    def __init__(self, capture: pytest.CaptureFixture[bytes]) -> None:
        self._capture = capture

    def __repr__(self) -> str:
        return "Cli()"

    def raw(self, *argv: str) -> tuple[int, bytes, str]:
        """The exit code, stdout as written and stderr."""
        self._capture.readouterr()
        code = main(list(argv))
        out, err = self._capture.readouterr()
        return code, out, err.decode()

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        code, out, err = self.raw(*argv)
        return code, out.decode(), err

    def text(self, *argv: str) -> str:
        """Stdout, once the command exited 0 and wrote nothing to stderr."""
        code, out, err = self(*argv)
        assert (code, err) == (0, ""), err
        return out

    def json(self, *argv: str) -> Any:
        return json.loads(self.text(*argv, "--json"))

    async def in_thread(self, *argv: str) -> str:
        """Stdout, once the command exited 0, run in a thread of its own: the
        CLI runs its own event loop, and an async test's is running."""
        code, out, err = await anyio.to_thread.run_sync(self, *argv)
        assert code == 0, err
        return out


_SYSTEMD_VARIABLES = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC", "WATCHDOG_PID")
