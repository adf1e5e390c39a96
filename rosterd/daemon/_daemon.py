"""``roster serve``: the daemon's lifetime from start to drained exit.

Start-up order matters: load and validate the org, lock and recover the
state directory, find the workers a session is open for, bind the socket,
start the task pool, and only then tell systemd READY=1; meanwhile those
workers' notes are indexed in the background (``WarmUp``). SIGTERM stops
accepting, lets in-flight turns finish (bounded by ``[daemon] drain_s``;
then their engine calls are interrupted, each recorded and answered with
1010), then exits 0.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import resource
import signal
import socket
from collections.abc import AsyncIterator, MutableMapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
from anyio.abc import SocketListener, TaskStatus

from .._clock import SYSTEM_CLOCK, Clock
from .._errors import ConfigError, as_itself
from ..observe import open_telemetry
from ..org import OrgSource
from ..protocol import StateLocation, default_socket_path
from ..runtime import Host, SessionManager, TaskRunner
from ..stores import State, open_state
from ._inspector import serve_inspector_apart
from ._methods import Methods
from ._server import RpcServer
from ._systemd import Notifier, listen_fds, watchdog_interval
from ._watch import OrgWatcher

log = logging.getLogger("rosterd.daemon")


async def run_daemon(
    org_dir: Path,
    state: StateLocation,
    socket_path: Path | None,
    environ: MutableMapping[str, str],
    *,
    clock: Clock = SYSTEM_CLOCK,
    stop: anyio.Event | None = None,
    metrics_listen: str | None = None,
    stores: AbstractAsyncContextManager[State] | None = None,
    task_status: TaskStatus[Path] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until SIGTERM, SIGINT or *stop*; raises ``RosterError`` if it cannot start.

    *stop* drains and exits as SIGTERM does, for a daemon embedded in another
    program (the tests run one in process, with *clock* under their
    control). ``task_status`` receives the socket path once it accepts.
    *state* is a directory (locked: one daemon each) or a PostgreSQL URL,
    which any number of daemons may share. *metrics_listen* overrides
    ``[metrics] listen``. *stores*, when given, is the state *state* names,
    opened the caller's way (a test counting a database's round trips).
    """
    async with _signals_from_the_start() as signals:
        notifier = Notifier.from_env(environ)
        inherited = listen_fds(environ)
        watchdog_s = watchdog_interval(environ)
        source = await OrgSource.load(org_dir, clock)
        if isinstance(state, Path):
            state = Path(await anyio.Path(state).resolve())
        # Named before the state is opened: a database without a socket path
        # is a usage mistake, reported as one.
        path = socket_path or default_socket_path(state, os.environ)
        async with (
            open_telemetry(
                source.current(), source.root / "org.toml", environ, metrics_listen
            ) as telemetry,
            stores or open_state(state) as opened,
            notifier,
            Host(source, opened, environ, clock, telemetry) as host,
        ):
            await host.runs.recover(host.clock())
            watcher = OrgWatcher(source)
            sessions = SessionManager(host, refresh_org=watcher.refresh)
            await sessions.warm_up.find()
            try:
                with as_itself():
                    await _serve(
                        host,
                        state,
                        sessions,
                        watcher,
                        path,
                        inherited,
                        signals,
                        notifier,
                        watchdog_s,
                        stop or anyio.Event(),
                        task_status,
                    )
            finally:
                await sessions.aclose()
    log.info("stopped")


class _Signals:
    """The daemon's signals, caught from its first line: a signal must not
    kill it while it starts (systemd counts a death by SIGHUP as a clean
    exit, and would not restart it). While it starts, SIGTERM or SIGINT ends
    the start-up (cancels ``starting``) and a SIGHUP is kept for later;
    once it serves, ``receiver`` is the serving daemon's."""

    # A SIGHUP came while it started: the org is loaded again once it serves.
    reload = False

    def __init__(self, receiver: AsyncIterator[int]) -> None:
        self.receiver = receiver
        self.starting = anyio.CancelScope()
        self._watching = anyio.CancelScope()

    def __repr__(self) -> str:
        return f"_Signals(serving={self._watching.cancel_called}, reload={self.reload})"

    async def watch_start_up(self) -> None:
        with self._watching:
            async for signum in self.receiver:
                if signum == signal.SIGHUP:
                    self.reload = True
                    continue
                log.info("%s while starting: not starting", signal.Signals(signum).name)
                self.starting.cancel()
                return

    def serving(self) -> None:
        """From now on the serving daemon reads the signals."""
        self._watching.cancel()


@asynccontextmanager
async def _signals_from_the_start() -> AsyncIterator[_Signals]:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as receiver:
        signals = _Signals(receiver)
        with as_itself():
            async with anyio.create_task_group() as early:
                early.start_soon(signals.watch_start_up)
                with signals.starting:
                    yield signals
                early.cancel_scope.cancel()


async def _serve(
    host: Host,
    state: StateLocation,
    sessions: SessionManager,
    watcher: OrgWatcher,
    path: Path,
    inherited: list[socket.socket],
    signals: _Signals,
    notifier: Notifier,
    watchdog_s: float | None,
    stop: anyio.Event,
    task_status: TaskStatus[Path],
) -> None:
    daemon = host.org.daemon
    tasks = TaskRunner(host, daemon.task_workers)
    where = f"fd {inherited[0].fileno()}" if inherited else str(path)

    async def accepting(problem: str | None) -> None:
        # Out of descriptors shows in `systemctl status` until accepting goes on.
        await notifier.status(f"serving on {where}" if problem is None else problem)

    server = RpcServer(
        Methods(host, sessions, tasks, watcher),
        allow_uids=daemon.allow_uids,
        allow_gids=daemon.allow_gids,
        max_connections=_fit_to_fd_limit(daemon.max_connections),
        max_connections_per_uid=daemon.max_connections_per_uid,
        send_timeout_s=daemon.send_timeout_s,
        idle_timeout_s=daemon.idle_timeout_s,
        on_accept=accepting,
    )
    stop_watching = anyio.Event()
    async with _listening(inherited, path) as listener, anyio.create_task_group() as tg:
        await tg.start(server.serve, listener)
        await tg.start(tasks.serve)
        tg.start_soon(watcher.run, stop_watching)
        tg.start_soon(sessions.run)
        tg.start_soon(host.leases.keep)
        host.telemetry.watch(lambda: len(sessions), lambda: server.connections)
        await tg.start(host.telemetry.keep_task_counts, host.stores.tasks)
        if watchdog_s is not None:
            tg.start_soon(_watchdog, notifier, watchdog_s / 2)
        if host.org.inspect.listen is not None:
            await tg.start(
                serve_inspector_apart,
                host.org.inspect,
                watcher.source.root,
                state,
                host.org.secret_env_names(),
            )
        signals.serving()
        if signals.reload:
            log.info("SIGHUP while starting: reloading the org")
            await watcher.reload()
        log.info("ready on %s (org %s, %r)", where, watcher.source.root, host.stores)
        await notifier.ready(status=f"serving on {where}")
        task_status.started(path)
        await _wait_for_stop(signals.receiver, watcher, stop)

        log.info("draining: %d connections, %d tasks running", server.connections, tasks.running)
        await server.drain()
        # After the drain began, so STOPPING=1 means no new client is taken.
        await notifier.stopping(status="draining in-flight turns")
        tasks.drain()
        stop_watching.set()
        tg.start_soon(_cancel_on_second_signal, signals.receiver, tg.cancel_scope)
        with anyio.move_on_after(host.org.daemon.drain_s) as deadline:
            await server.stopped.wait()
            await tasks.stopped.wait()
        if deadline.cancel_called:
            # Interrupted turns record an error entry and reply 1010 rather
            # than leave their clients with EOF and their transcripts open.
            log.warning("drain cut short; interrupting %d engine calls", host.calls_in_flight)
            host.interrupt()
            with anyio.move_on_after(_INTERRUPT_GRACE_S) as grace:
                await server.stopped.wait()
                await tasks.stopped.wait()
            if grace.cancel_called:
                log.warning("interrupted turns did not finish; cancelling what is left")
        tg.cancel_scope.cancel()


@asynccontextmanager
async def _listening(inherited: list[socket.socket], path: Path) -> AsyncIterator[SocketListener]:
    """systemd's socket, or one bound at *path* and removed at the end, unless
    by then it is another's: a successor may bind the path as soon as this
    daemon stops accepting, long before its drain ends."""
    if inherited:
        yield await SocketListener.from_socket(inherited[0])
        return
    listener = await _bind(path)
    bound = _file_identity(path)
    try:
        yield listener
    finally:
        # Synchronous on purpose: this runs while the task group is cancelled.
        if bound is not None and _file_identity(path) == bound:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at *path* itself, not what a symlink names."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


async def _bind(path: Path) -> SocketListener:
    await anyio.Path(path.parent).mkdir(parents=True, exist_ok=True)
    async with _binding_alone(path):
        if await _someone_listening(path):
            raise ConfigError(
                f"{path}: another daemon is already listening on this socket", path=str(path)
            )
        try:
            return await anyio.create_unix_listener(path, mode=0o660)
        except OSError as exc:
            # anyio removes a stale socket before it binds: what still holds the path is no socket.
            why = (
                "a file that is not a socket is in the way"
                if exc.errno == errno.EADDRINUSE
                else exc.strerror or str(exc)
            )
            raise ConfigError(f"{path}: cannot listen: {why}", path=str(path)) from None


@asynccontextmanager
async def _binding_alone(path: Path) -> AsyncIterator[None]:
    """The lock on ``<path>.lock``, from the look for a live daemon to the
    bind: two daemons started at once would both find the path free, and
    the later bind would remove the earlier one's socket, leaving it
    serving no one. The file stays: removing it would let a third daemon
    lock a new file while the second still holds the old one."""
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ConfigError(f"{lock}: cannot lock: {exc.strerror}", path=str(lock)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("%s: another daemon is starting on this socket; waiting for it", path)
            # Held only while the other looks and binds: a short wait.
            await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        # Closing the file releases the lock.
        os.close(fd)


# How long a socket at our path may take to accept a connection before it
# counts as a live daemon's, too busy to answer (its backlog full, say,
# while it is out of descriptors), rather than a stale file to take over.
_LISTENING_CHECK_S = 2.0


async def _someone_listening(path: Path) -> bool:
    if not await anyio.Path(path).exists():
        return False
    with anyio.move_on_after(_LISTENING_CHECK_S):
        try:
            stream = await anyio.connect_unix(path)
        except OSError:
            return False
        await stream.aclose()
    return True


async def _wait_for_stop(
    signals: AsyncIterator[int], watcher: OrgWatcher, stop: anyio.Event
) -> None:
    async with anyio.create_task_group() as tg:

        async def on_signals() -> None:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    log.info("SIGHUP: reloading the org")
                    await watcher.reload()
                    continue
                log.info("%s received", signal.Signals(signum).name)
                stop.set()
                return

        tg.start_soon(on_signals)
        await stop.wait()
        tg.cancel_scope.cancel()


async def _cancel_on_second_signal(signals: AsyncIterator[int], serving: anyio.CancelScope) -> None:
    async for signum in signals:
        if signum != signal.SIGHUP:
            log.warning("%s again: stopping without waiting", signal.Signals(signum).name)
            serving.cancel()
            return


async def _watchdog(notifier: Notifier, every_s: float) -> None:
    while True:
        await notifier.watchdog()
        await anyio.sleep(every_s)


# How long turns cut short by a drain that ran out get to record their error
# entry and send their reply: disk writes and a closed provider stream.
_INTERRUPT_GRACE_S = 5.0

# Descriptors kept free for state files, the listener, provider connections and
# a spawned editor or engine: a connection never takes the last of them.
_FDS_RESERVED = 64


def _fit_to_fd_limit(max_connections: int) -> int:
    """Clamp max_connections so every admitted connection can get a descriptor."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    fitted = max(1, soft - _FDS_RESERVED)
    if fitted < max_connections:
        log.warning(
            "max_connections %d lowered to %d: the open-file limit is %d (raise LimitNOFILE)",
            max_connections,
            fitted,
            soft,
        )
        return fitted
    return max_connections
