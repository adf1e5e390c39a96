"""Hostile-input benchmark: what maximal inputs and idle connections cost a real daemon.

Prints, from one run:
- resident memory while max-size messages are posted to one channel and
  then to three more (the in-memory tail is bounded in characters);
- resident memory for max-size memory notes (kept whole, by design);
- as root with ``setpriv``: a second uid holding connections that never send
  a byte, how many of them were admitted or refused, and whether
  ``roster status`` still answers meanwhile, with its latency;
- start-up over a long history: the time from ``roster serve`` to its
  READY=1 and a ``daemon.status`` answer, on state directories of 1,000 and
  100,000 finished runs (100 and 2,000 with --quick), the first start of
  each and the starts after it, and their ratio.

Usage: python bench/limits.py [--quick] [--start-up-only]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _daemon import open_fds, rss_kib, serve, write_org
from harness import HOLD_CONNECTIONS

from rosterd.client import RosterClient
from rosterd.stores.files import FileRuns

MESSAGE_MAX = 262_144
NOTE_MAX = 65_536
OTHER_UID = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
START_UP_RUNS = (1_000, 100_000)
START_UP_RUNS_QUICK = (100, 2_000)
START_UP_ROUNDS = 3


def mib(kib: int) -> str:
    return f"{kib / 1024:+.1f} MiB"


async def posts_and_notes(client: RosterClient, pid: int, posts: int, notes: int) -> None:
    base = rss_kib(pid)
    big = "z" * MESSAGE_MAX
    for n in range(1, posts + 1):
        await client.call("channel.post", {"channel": "c0", "from": "bo", "text": big})
        if n % (posts // 5) == 0:
            print(f"{n:>5} max-size posts to one channel: RSS {mib(rss_kib(pid) - base)}")
    for channel in ("c1", "c2", "c3"):
        for _ in range(posts // 10):
            await client.call("channel.post", {"channel": channel, "from": "bo", "text": big})
    print(f"  +{posts // 10} to each of 3 more channels: RSS {mib(rss_kib(pid) - base)}")
    before = rss_kib(pid)
    for _ in range(notes):
        await client.call("memory.add", {"worker": "ada", "text": "n" * NOTE_MAX})
    print(f"{notes:>5} max-size memory notes: RSS {mib(rss_kib(pid) - before)}")


def second_uid_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("setpriv", "prlimit", SYSTEM_PYTHON):
        if shutil.which(tool) is None:
            return f"{tool} is missing"
    return None


async def status_latency(socket: Path, runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        done = await anyio.run_process(
            [sys.executable, "-m", "rosterd.cli", "status", "--socket", str(socket)], check=False
        )
        seconds.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise RuntimeError(f"roster status failed: {done.stderr.decode()}")
    return seconds


async def idle_connections(socket: Path, pid: int, count: int, runs: int) -> None:
    if reason := second_uid_missing():
        print(f"idle connections of a second uid: skipped ({reason})")
        return
    idle = statistics.median(await status_latency(socket, runs))
    before_rss, before_fds = rss_kib(pid), open_fds(pid)
    command = [
        "prlimit", f"--nofile={count + 64}:{count + 64}",
        "setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
        SYSTEM_PYTHON, "-c", HOLD_CONNECTIONS, str(socket), str(count),
    ]  # fmt: skip
    async with await anyio.open_process(command) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        line = b""
        with anyio.fail_after(60):
            while not line.endswith(b"\n"):
                line += await holder.stdout.receive()
        codes: list[int] = json.loads(line)
        held = await status_latency(socket, runs)
        rss, fds = rss_kib(pid), open_fds(pid)
        await holder.stdin.aclose()
        await holder.wait()
    print(
        f"uid {OTHER_UID} opening {count} idle connections: {codes.count(0)} admitted, "
        f"{codes.count(1007)} refused with 1007, {len(codes) - codes.count(0) - codes.count(1007)}"
        f" other; fds {before_fds} -> {fds}, RSS {mib(rss - before_rss)}"
    )
    print(
        f"roster status meanwhile: {len(held)}/{runs} answered, median "
        f"{statistics.median(held) * 1000:.0f} ms, max {max(held) * 1000:.0f} ms "
        f"(idle daemon: {idle * 1000:.0f} ms; the CLI's start-up included)"
    )


def make_org(root: Path) -> None:
    root.chmod(0o755)  # the second uid must reach the socket
    write_org(root / "org", ("ada",), 4, identity_lines=5)
    toml = root / "org" / "org.toml"
    toml.write_text(toml.read_text() + f"\n[daemon]\nallow_uids = [{os.getuid()}, {OTHER_UID}]\n")


async def finished_runs(root: Path) -> list[Path]:
    """A direct run and a closed session, each finished by a real daemon:
    the run directories every seeded run is a copy of."""
    socket = root / "rosterd.sock"
    async with (
        serve(root / "org", root / "template", socket),
        await RosterClient.connect(socket) as client,
    ):
        direct = (await client.run_direct("ada", "hello")).run
        session = (await client.session_open("ada", "c0")).session
        await client.session_send(session, "hello")
        await client.session_close(session)
    return [root / "template" / "runs" / run for run in (direct, session)]


def seed_runs(state: Path, templates: list[Path], count: int) -> None:
    """*count* finished runs under *state*, each a template's files as its
    daemon wrote them, with a new id of the template's kind in place of its own."""
    runs = FileRuns(state)
    runs.root.mkdir(parents=True, mode=0o700)
    files = [(t.name, {f.name: f.read_bytes() for f in t.iterdir()}) for t in templates]
    for n in range(count):
        template, contents = files[n % len(files)]
        run = runs.new_id(template.partition("-")[0], 1_700_000_000 + n)
        directory = runs.path(run)
        directory.mkdir(mode=0o700)
        for name, data in contents.items():
            fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as handle:
                handle.write(data.replace(template.encode(), run.encode()))
    # Months-old state is on disk, not dirty in the page cache.
    os.sync()


async def start_up_seconds(root: Path, state: Path) -> float:
    """From ``roster serve`` to its READY=1 and a ``daemon.status`` answer."""
    socket = root / "rosterd.sock"
    start = time.perf_counter()
    async with serve(root / "org", state, socket, ready_s=1800):
        async with await RosterClient.connect(socket) as client:
            await client.daemon_status()
        return time.perf_counter() - start


async def start_up(root: Path, quick: bool) -> None:
    sizes = START_UP_RUNS_QUICK if quick else START_UP_RUNS
    templates = await finished_runs(root)
    first: dict[int, float] = {}
    for size in sizes:
        seed_runs(root / f"state-{size}", templates, size)
        first[size] = await start_up_seconds(root, root / f"state-{size}")
    later: dict[int, list[float]] = {size: [] for size in sizes}
    # Rotated, so that machine noise (other processes) hits every size alike.
    for n in range(START_UP_ROUNDS):
        for k in range(len(sizes)):
            size = sizes[(n + k) % len(sizes)]
            later[size].append(await start_up_seconds(root, root / f"state-{size}"))
    for size in sizes:
        print(
            f"start-up over {size:>7,} finished runs: first start {first[size]:.2f} s, "
            f"later starts {statistics.median(later[size]):.2f} s (median of {START_UP_ROUNDS})"
        )
    small, big = sizes
    ratio = statistics.median(later[big]) / statistics.median(later[small])
    print(
        f"ratio start-up {big:,} runs / {small:,} runs: "
        f"first start {first[big] / first[small]:.2f}, later starts {ratio:.2f}"
    )


async def run(quick: bool, start_up_only: bool) -> None:
    if start_up_only:
        with tempfile.TemporaryDirectory() as tmp:
            make_org(Path(tmp))
            await start_up(Path(tmp), quick)
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_org(root)
        socket = root / "rosterd.sock"
        async with serve(root / "org", root / "state", socket) as daemon:
            if os.geteuid() == 0:
                os.chown(socket, 0, OTHER_UID)
            async with await RosterClient.connect(socket) as client:
                await client.call("daemon.status")
                await posts_and_notes(
                    client, daemon.pid, 50 if quick else 1000, 20 if quick else 200
                )
            await idle_connections(socket, daemon.pid, 100 if quick else 1100, 3 if quick else 20)
        await start_up(root, quick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer inputs, for CI smoke runs")
    parser.add_argument(
        "--start-up-only", action="store_true", help="only the start-up over a long history"
    )
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    anyio.run(run, args.quick, args.start_up_only)


if __name__ == "__main__":
    main()
