"""What the daemon benchmarks share: an org on disk, a real daemon, /proc readings."""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import psycopg
from anyio.abc import Process

from rosterd import RosterError
from rosterd.client import RosterClient

__all__ = (
    "cpu_seconds",
    "one_core_for",
    "open_fds",
    "percentile",
    "poll_status",
    "rss_kib",
    "serve",
    "server_processes",
    "write_org",
)


def write_org(root: Path, workers: Sequence[str], channels: int, identity_lines: int = 50) -> None:
    """Workers that are members of every channel c0 .. c<channels-1>, echo engine."""
    for worker in workers:
        (root / "workers" / worker).mkdir(parents=True)
        (root / "workers" / worker / "identity.md").write_text(
            f"You are {worker}.\n" * identity_lines
        )
    members = ", ".join(f'"{w}"' for w in workers)
    lines = ['[engine]\nkind = "echo"\n', *(f"[workers.{w}]\n" for w in workers)]
    for n in range(channels):
        lines.append(f"[channels.c{n}]\nworkers = [{members}]\n")
        (root / "channels" / f"c{n}").mkdir(parents=True)
        (root / "channels" / f"c{n}" / "purpose.md").write_text(f"Channel {n}.\n" * 10)
    (root / "org.toml").write_text("\n".join(lines))


@asynccontextmanager
async def serve(
    org: Path,
    state: Path | str,
    socket: Path,
    *,
    profile: Path | None = None,
    ready_s: float = 20.0,
) -> AsyncIterator[Process]:
    """``roster serve`` as a child process, ready on *socket* (its READY=1,
    as systemd would see it, within *ready_s*); SIGTERM on exit. *state* is
    a directory or a PostgreSQL URL. With *profile*, the daemon runs under
    bench/_profile.py, which writes its counts there at exit."""
    command = [sys.executable, "-m", "rosterd.cli"]
    if profile is not None:
        command = [sys.executable, str(Path(__file__).with_name("_profile.py")), str(profile)]
    with _notify_socket() as (notify, address):
        daemon = await anyio.open_process(
            [*command, "serve", "--org", str(org), "--state", str(state), "--socket", str(socket),
             "--log-level", "WARNING"],
            stdout=None, stderr=None, env={**os.environ, "NOTIFY_SOCKET": address},
        )  # fmt: skip
        try:
            with anyio.fail_after(ready_s):
                await _wait_ready(notify, daemon)
            yield daemon
        finally:
            daemon.terminate()
            await daemon.wait()


@contextmanager
def _notify_socket() -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket in the abstract namespace, and its NOTIFY_SOCKET value."""
    name = f"rosterd-bench-{secrets.token_hex(8)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(f"\0{name}")
        yield notify, f"@{name}"


async def _wait_ready(notify: socket.socket, daemon: Process) -> None:
    """Until the daemon sends READY=1; raises if it exits first."""

    async def exited() -> None:
        await daemon.wait()
        raise RosterError(f"roster serve exited with {daemon.returncode} before READY=1")

    async with anyio.create_task_group() as tg:
        tg.start_soon(exited)
        while True:
            await anyio.wait_readable(notify)
            if b"READY=1" in notify.recv(4096).split(b"\n"):
                break
        tg.cancel_scope.cancel()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS line")


def cpu_seconds(pid: int) -> float:
    """The CPU time process *pid* has used so far, every thread; one that
    has ended counts nothing."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return 0.0
    # After the command's closing parenthesis: utime and stime are fields 14 and 15.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_processes(url: str) -> Callable[[], list[int]]:
    """The processes of the PostgreSQL server serving *url*, if it runs on
    this machine: a call lists its postmaster and the postmaster's children
    as they are then (pools open connections, a process each, as they go);
    nothing for a server elsewhere.

    The server is found from the parent of the backend serving a connection
    of ours, so another server on this machine (a test's) is never counted.
    """
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT pg_backend_pid()").fetchone()
        backend = row[0] if row is not None else 0
        postmaster = _parent(backend) if _command(backend) == "postgres" else None
    if postmaster is None or _command(postmaster) != "postgres":
        return list
    return lambda: [postmaster, *_children(postmaster)]


def _command(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _parent(pid: int) -> int | None:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return next((int(line.split()[1]) for line in lines if line.startswith("PPid:")), None)


def _children(pid: int) -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and _parent(int(e)) == pid]


@contextmanager
def one_core_for(pids: Sequence[int]) -> Iterator[None]:
    """Every thread of the processes *pids* on one core, and this process on
    the others, until the block ends; nothing on a machine of one core.

    Daemons compared side by side then share one core alike. Left to the
    scheduler, two daemons of one configuration measured up to 5% apart,
    one run to the next: more than the overheads compared.
    """
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        yield
        return
    mine = set(cores[:-1])
    for pid in pids:
        for thread in os.listdir(f"/proc/{pid}/task"):
            # A thread started later takes its starter's: the main thread's.
            os.sched_setaffinity(int(thread), {cores[-1]})
    os.sched_setaffinity(0, mine)
    try:
        yield
    finally:
        os.sched_setaffinity(0, set(cores))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def poll_status(client: RosterClient, latencies: list[float], stop: anyio.Event) -> None:
    """``daemon.status`` until *stop*, each call's latency into *latencies*,
    paced like a monitor rather than a flood competing with the daemon's work."""
    while not stop.is_set():
        start = time.perf_counter()
        await client.call("daemon.status")
        latencies.append(time.perf_counter() - start)
        with anyio.move_on_after(0.005):
            await stop.wait()
