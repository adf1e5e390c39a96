"""How fast the inspector's pages are for big runs, and how big they get.

A real daemon (echo engine, in this process) writes a session of 2,000
turns, and a session whose last request is over 200 KB; the inspector (its
ASGI app, in this process, over the same state directory) renders the
run's page, its last page of turns and the big turn's page, several times
each. Then 10,000 more runs are laid beside them (their ``run.json`` files
only, as the file store writes them) and the runs list is rendered.
Printed: the median render time and the page's size.

Then a daemon serves that state, its inspector with it (``[inspect]
listen``), and a client calls ``daemon.status`` (paced like a monitor)
while nothing else runs and while another renders the long run's page from
the daemon's inspector: the latencies side by side, since a page built on
the loop that serves turns would hold every session up for as long. Last,
how long ``runs.context`` takes over the socket for the long run's latest
request, as a frontend asks the daemon itself.

Aims: each page under 150 ms, none over 2 MB (paging and collapsed blocks);
the daemon's answers while a page renders held up by far less than the
page takes.

Usage: python bench/inspector.py [--quick]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import anyio
import httpx
import msgspec
from _daemon import poll_status, serve

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness import daemon_in_process
from simulator import write_org

from rosterd.client import RosterClient
from rosterd.inspect import create_app
from rosterd.protocol import RunInfo
from rosterd.stores import read_state_runs

RENDERS = 7


async def write_runs(root: Path, turns: int) -> tuple[str, str]:
    """A long session and one with a big request; their ids."""
    write_org(root / "org", workers=1, channels=2, identity_chars=2000, purpose_chars=500)
    with (root / "org" / "org.toml").open("a") as toml:
        toml.write("\n[context]\nsession_chars = 100000000\n")
    async with (
        daemon_in_process(root / "org", root / "state") as daemon,
        await daemon.client() as client,
    ):
        long = await client.session_open("w0", "c0")
        for turn in range(turns):
            await client.session_send(long.session, f"turn {turn}: anything new?")
        big = await client.session_open("w0", "c1")
        for turn in range(10):
            await client.session_send(big.session, f"part {turn}: " + "x" * 20_000)
    return long.session, big.session


def lay_runs(runs: Path, count: int) -> None:
    """*count* finished direct runs, as the file store lays them out."""
    for number in range(count):
        info = RunInfo(
            id=f"d-bench-{number:05d}",
            surface="direct",
            worker="w0",
            channel=None,
            created_at=1_700_000_000.0 + number,
            status="done",
        )
        (runs / info.id).mkdir()
        (runs / info.id / "run.json").write_bytes(msgspec.json.encode(info))


async def timed(web: httpx.AsyncClient, url: str) -> tuple[float, int]:
    """The median time to render *url*, in ms, and its size in bytes."""
    times = []
    size = 0
    for _ in range(RENDERS):
        start = time.perf_counter()
        response = await web.get(url)
        times.append((time.perf_counter() - start) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}")
        size = len(response.content)
    return statistics.median(times), size


async def run(turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        long, big = await write_runs(root, turns)
        app = create_app(partial(read_state_runs, root / "state"))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as web:
            pages = {
                f"run of {turns} turns": f"/runs/{long}",
                "its last page of turns": f"/runs/{long}?page={turns // 200}",
                f"turn {turns} of it": f"/runs/{long}/turns/{turns}",
                "turn of a 200 KB request": f"/runs/{big}/turns/10",
                "runs list": "/",
            }
            print(f"{'page':>28} {'median ms':>10} {'KB':>8}")
            for name, url in pages.items():
                ms, size = await timed(web, url)
                print(f"{name:>28} {ms:>10.1f} {size / 1024:>8.1f}")
            runs = turns * 5
            lay_runs(root / "state" / "runs", runs)
            ms, size = await timed(web, "/")
            print(f"{f'runs list of {runs + 2} runs':>28} {ms:>10.1f} {size / 1024:>8.1f}")
        print("aim: every page under 150 ms and under 2048 KB")
        await status_while_rendering(root, f"/runs/{long}", f"the run of {turns} turns")


async def status_while_rendering(root: Path, page: str, name: str) -> None:
    """``daemon.status`` latencies of a daemon serving *root*'s state, idle
    and while its own inspector renders *page* ``RENDERS`` times."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (root / "org" / "org.toml").open("a") as toml:
        toml.write(f'\n[inspect]\nlisten = "127.0.0.1:{port}"\n')
    idle: list[float] = []
    rendering: list[float] = []
    run = page.rsplit("/", 1)[-1]
    async with (
        serve(root / "org", root / "state", root / "rosterd.sock"),
        await RosterClient.connect(root / "rosterd.sock") as client,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as web,
    ):
        # What a frontend asks the daemon itself: the run's latest request.
        asked = []
        for _ in range(RENDERS):
            start = time.perf_counter()
            await client.runs_context(run)
            asked.append((time.perf_counter() - start) * 1000)
        for latencies, renders in ((idle, 0), (rendering, RENDERS)):
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll_status, client, latencies, stop)
                if renders:
                    for _ in range(renders):
                        (await web.get(page)).raise_for_status()
                else:
                    await anyio.sleep(0.5)
                stop.set()
    print(f"daemon.status from another client, ms, while the daemon's inspector renders {name}:")
    print(f"{'':>28} {'calls':>6} {'p50':>7} {'max':>7}")
    for label, latencies in (("idle", idle), (f"{RENDERS} renders", rendering)):
        ms = [seconds * 1000 for seconds in latencies]
        print(f"{label:>28} {len(ms):>6} {statistics.median(ms):>7.2f} {max(ms):>7.2f}")
    print(f"ratio max while rendering / max idle: {max(rendering) / max(idle):.1f}")
    print(f"runs.context of {name} over the socket: median {statistics.median(asked):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 turns, for CI smoke runs")
    args = parser.parse_args()
    anyio.run(run, 200 if args.quick else 2000)


if __name__ == "__main__":
    main()
