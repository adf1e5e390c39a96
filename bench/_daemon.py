"""What the daemon benchmarks share: an org on disk, a real daemon, /proc readings."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process

from rosterd import RosterError
from rosterd.client import RosterClient

__all__ = ("open_fds", "percentile", "rss_kib", "serve", "write_org")


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
    org: Path, state: Path | str, socket: Path, *, profile: Path | None = None
) -> AsyncIterator[Process]:
    """``roster serve`` as a child process, ready on *socket*; SIGTERM on exit.
    *state* is a directory or a PostgreSQL URL. With *profile*, the daemon
    runs under bench/_profile.py, which writes its counts there at exit."""
    command = [sys.executable, "-m", "rosterd.cli"]
    if profile is not None:
        command = [sys.executable, str(Path(__file__).with_name("_profile.py")), str(profile)]
    daemon = await anyio.open_process(
        [*command, "serve", "--org", str(org), "--state", str(state), "--socket", str(socket),
         "--log-level", "WARNING"],
        stdout=None, stderr=None,
    )  # fmt: skip
    try:
        await _wait_socket(socket)
        yield daemon
    finally:
        daemon.terminate()
        await daemon.wait()


async def _wait_socket(path: Path) -> None:
    with anyio.fail_after(20):
        while True:
            try:
                client = await RosterClient.connect(path)
            except RosterError:
                await anyio.sleep(0.05)
                continue
            await client.aclose()
            return


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS line")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
