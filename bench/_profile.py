"""The daemon under cProfile, every thread of it, over a window of turns; and
where a turn's time went, by bucket.

Run as a script, ``python bench/_profile.py OUT ARGS...`` is ``roster ARGS...``
(``serve(..., profile=OUT)`` starts it so) with a profiler in each thread:
the main thread's from SIGUSR1, each later thread's (anyio's workers, which
compile and fsync, and the default executor's) from its start. SIGUSR1 starts
the window (what was counted before is cleared), SIGUSR2 ends it (each
thread's counts are taken); at exit they are written to OUT, merged, in the
format of ``pstats`` (``python -m pstats OUT`` reads it).

``breakdown`` puts each function's own time (tottime) into one bucket:

- compile: code in ``rosterd/compiler``;
- encode: msgspec's encode and decode, wherever called (the compiler's
  hashes of encoded JSON too), and ``rosterd/protocol``;
- store: ``rosterd/stores``, aiofiles, and ``os.write`` / ``os.fsync``
  wherever called;
- socket: ``rosterd/daemon`` (framing, dispatch, replies) and anyio's
  streams, with the socket sends and receives they make;
- engine glue: the rest of rosterd (sessions, engines, org, observe);
- other: what no bucket claims, mostly the event loop's own work and the
  worker threads' hand-offs;
- idle, left out: waiting for work (``epoll``, a lock or queue, a sleep, the
  org watcher).

A function that lives elsewhere (builtins, the standard library, anyio,
NumPy) takes the bucket of its callers, split by the time each caller spent
in it; a caller that lives elsewhere too takes its own callers', and so on
(a cycle adds nothing; a root is other). A worker thread's loop is a root,
so the hand-off of a result back to the event loop (``call_soon_threadsafe``
writing to its self-pipe) is other, whoever asked for the thread.

Own time is the thread's wall-clock time, not its CPU time: with the idle
waits left out it is mostly CPU, but an fsync is the disk's wait (reported
apart), and a send that wakes another thread or process can include the
time that one ran before the sender got the core back (on two busy cores it
often does). The profiler adds a cost to every call, so call-heavy code
looks bigger than it is: read the shares, and the per-turn times only
against each other.
"""

from __future__ import annotations

import cProfile
import marshal
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

import anyio
from _daemon import serve

from rosterd.client import RosterClient

__all__ = ("BUCKETS", "Breakdown", "Stats", "breakdown", "load", "profile_turns")

Label = tuple[str, int, str]
Edge = tuple[int, int, float, float]
Stats = dict[Label, tuple[int, int, float, float, dict[Label, Edge]]]

BUCKETS = ("compile", "encode", "store", "socket", "engine glue", "other")

# Where a function's file lives, first match wins.
_HOMES = (
    ("/rosterd/compiler/", "compile"),
    ("/rosterd/protocol/", "encode"),
    ("/rosterd/stores/", "store"),
    ("/aiofiles/", "store"),
    ("/rosterd/daemon/", "socket"),
    ("/anyio/streams/", "socket"),
    ("/rosterd/", "engine glue"),
)
_FSYNC = "<built-in method posix.fsync>"
_WAKE = "_write_to_self"
_IDLE = frozenset(
    {
        "<method 'acquire' of '_thread.lock' objects>",
        "<method 'acquire' of '_thread.RLock' objects>",
        "<method 'poll' of 'select.epoll' objects>",
        "<method 'get' of '_queue.SimpleQueue' objects>",
        "<method 'watch' of 'builtins.RustNotify' objects>",
        "<built-in method time.sleep>",
    }
)


def _home(label: Label) -> str | None:
    """The bucket of the function itself, or None when its callers decide."""
    path, _, name = label
    if path != "~":
        return next((bucket for marker, bucket in _HOMES if marker in path), None)
    if name in _IDLE:
        return "idle"
    if "msgspec" in name and ("encode" in name or "decode" in name):
        return "encode"
    if name in (_FSYNC, "<built-in method posix.write>"):
        return "store"
    return None


class Breakdown:
    """Seconds of own time per bucket over the window (idle left out); of
    them, waiting on fsync, and worker threads waking the event loop."""

    def __init__(self, seconds: dict[str, float], fsync: float, wakeups: float) -> None:
        self.seconds = seconds
        self.fsync = fsync
        self.wakeups = wakeups

    def __repr__(self) -> str:
        return f"Breakdown({self.total:.3f} s)"

    @property
    def total(self) -> float:
        return sum(self.seconds[bucket] for bucket in BUCKETS)


def breakdown(stats: Stats) -> Breakdown:
    shares: dict[Label, dict[str, float]] = {}
    visiting: set[Label] = set()

    def share(label: Label) -> dict[str, float]:
        """How *label*'s time divides between buckets."""
        known = shares.get(label)
        if known is not None:
            return known
        home = _home(label)
        if home is not None:
            shares[label] = {home: 1.0}
            return shares[label]
        if label in visiting:
            return {}
        visiting.add(label)
        parts: dict[str, float] = defaultdict(float)
        for caller, (_, _, _, cumulative) in stats.get(label, (0, 0, 0.0, 0.0, {}))[4].items():
            for bucket, fraction in share(caller).items():
                parts[bucket] += cumulative * fraction
        visiting.discard(label)
        weight = sum(parts.values())
        result = {b: t / weight for b, t in parts.items()} if weight > 0 else {"other": 1.0}
        shares[label] = result
        return result

    seconds: dict[str, float] = dict.fromkeys((*BUCKETS, "idle"), 0.0)
    for label, (_, _, own, _, callers) in stats.items():
        home = _home(label)
        if home is not None:
            seconds[home] += own
            continue
        # Split by caller: each caller's part of the own time goes its way;
        # what no caller accounts for (called from outside the window) is other.
        accounted = 0.0
        for caller, (_, _, own_here, _) in callers.items():
            accounted += own_here
            for bucket, fraction in (share(caller) or {"other": 1.0}).items():
                seconds[bucket] += own_here * fraction
        seconds["other"] += max(own - accounted, 0.0)
    fsync = sum(own for label, (_, _, own, _, _) in stats.items() if label[2] == _FSYNC)
    wakeups = sum(
        cumulative
        for (path, _, name), (_, _, _, cumulative, _) in stats.items()
        if name == _WAKE and path.endswith("asyncio/selector_events.py")
    )
    return Breakdown(seconds, fsync, wakeups)


def load(path: Path) -> Stats:
    stats: Stats = marshal.loads(path.read_bytes())
    return stats


async def profile_turns(
    org: Path, state: Path, socket_path: Path, out: Path, worker: str, channel: str, turns: int
) -> list[float]:
    """*turns* turns of one session on a profiled daemon, whose counts over
    them are in *out* on return; the turns' latencies, from its client."""
    latencies: list[float] = []
    async with (
        serve(org, state, socket_path, profile=out) as daemon,
        await RosterClient.connect(socket_path) as client,
    ):
        session = (await client.session_open(worker, channel)).session
        # The first turn carries the channel's history, and the first
        # writes start the worker threads: both before the window.
        for n in range(5):
            await client.session_send(session, f"warm-up {n}")
        daemon.send_signal(signal.SIGUSR1)
        # The handler runs when the daemon's main thread next runs Python.
        await anyio.sleep(0.1)
        for n in range(turns):
            start = time.perf_counter()
            await client.session_send(session, f"turn {n}")
            latencies.append(time.perf_counter() - start)
        # Handled before the SIGTERM that follows: handlers run in signal
        # number order, and SIGTERM's only wakes the event loop.
        daemon.send_signal(signal.SIGUSR2)
    return latencies


def _merge(
    into: Stats, stats: Mapping[Label, tuple[int, int, float, float, Mapping[Label, Edge]]]
) -> None:
    for label, (calls, primitive, own, cumulative, callers) in stats.items():
        before = into.get(label, (0, 0, 0.0, 0.0, {}))
        merged = dict(before[4])
        for caller, edge in callers.items():
            earlier = merged.get(caller, (0, 0, 0.0, 0.0))
            merged[caller] = (
                earlier[0] + edge[0],
                earlier[1] + edge[1],
                earlier[2] + edge[2],
                earlier[3] + edge[3],
            )
        into[label] = (
            before[0] + calls,
            before[1] + primitive,
            before[2] + own,
            before[3] + cumulative,
            merged,
        )


def main(argv: list[str]) -> int:
    out, args = Path(argv[0]), argv[1:]
    main_thread = cProfile.Profile()
    threads: list[cProfile.Profile] = []
    taken: Stats = {}

    def in_thread(frame: FrameType, event: str, arg: object) -> None:
        # The first event of a new thread: from here a profiler of its own
        # takes over from this hook.
        profile = cProfile.Profile()
        threads.append(profile)
        profile.enable()

    def start(signum: int, frame: FrameType | None) -> None:
        # Signal handlers run in the main thread, holding the GIL: no other
        # thread runs Python (or its profiler) while the counts are cleared.
        for profile in threads:
            profile.clear()
        main_thread.enable()

    def stop(signum: int, frame: FrameType | None) -> None:
        main_thread.disable()
        for profile in (main_thread, *threads):
            # A snapshot of the counts: the thread's profiler is left running.
            profile.snapshot_stats()
            _merge(taken, profile.stats)

    threading.setprofile(in_thread)
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from rosterd.cli import main as roster

    code = roster(args)
    out.write_bytes(marshal.dumps(taken))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
