"""The threads that write logs: a batch of appends to one log, written,
fsynced and (if that failed) cut back in one hop off the event loop.

One job is all of a batch's disk work, so a batch costs one thread hop
whatever becomes of it. A writer that finds several jobs waiting takes up
to ``GROUP`` of them and hands their outcomes back to the event loop with
one wake-up: under load, the batches of many logs (a turn's trace and
transcript, other sessions' turns) share the hops there and back instead
of paying two each. The threads are the daemon's own, apart from anyio's
worker threads, so a compilation or a document write moved off the loop
never waits behind them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import NamedTuple

log = logging.getLogger("rosterd.stores")

# Threads writing at once: fsyncs of different files overlap on the device,
# and more threads than this only queue in the kernel's journal.
WRITERS = 8
# Jobs one writer takes at a time, when they are waiting: their outcomes
# reach the loop together, the first's no later than the last's fsync.
GROUP = 4


class Written(NamedTuple):
    """What became of a batch: per append, the error that kept it out of
    the file (``None``: it is durable); where the log's durable records end
    now; and the error of a cut back that failed, after which the file
    holds a failed write's bytes and the log takes no more."""

    errors: list[OSError | None]
    size: int
    cut: OSError | None


# A batch's outcome, as the event loop gets it: a fault of ours instead of
# a ``Written`` if the job itself failed.
Outcome = Written | Exception
Done = Callable[[Outcome], None]


class _Job(NamedTuple):
    loop: asyncio.AbstractEventLoop
    fd: int
    size: int
    datas: Sequence[bytes]
    done: Done


_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_started = threading.Lock()
_writers: list[threading.Thread] = []


def write_batch(
    loop: asyncio.AbstractEventLoop, fd: int, size: int, datas: Sequence[bytes], done: Done
) -> None:
    """Append *datas* to the log open as *fd*, whose durable records end at
    *size*, off the loop; *done* gets the outcome, called on *loop*.

    The batch goes in with one write and one fsync. If that fails (a full
    disk, say), the file is cut back to *size* and each is written alone,
    so only an append that cannot be written fails."""
    if len(_writers) < WRITERS:
        _start_writers()
    _jobs.put(_Job(loop, fd, size, datas, done))


def _start_writers() -> None:
    with _started:
        while len(_writers) < WRITERS:
            # A daemon thread: a log is closed only once its writes are
            # done, so one left waiting for jobs holds nothing.
            name = f"rosterd-writer_{len(_writers)}"
            writer = threading.Thread(target=_write_jobs, name=name, daemon=True)
            writer.start()
            _writers.append(writer)


def _write_jobs() -> None:
    while True:
        jobs = [_jobs.get()]
        while len(jobs) < GROUP:
            try:
                jobs.append(_jobs.get_nowait())
            except queue.Empty:
                break
        finished: defaultdict[asyncio.AbstractEventLoop, list[tuple[Done, Outcome]]]
        finished = defaultdict(list)
        for job in jobs:
            outcome: Outcome
            try:
                outcome = _write_batch(job.fd, job.size, job.datas)
            except Exception as exc:
                outcome = exc
            finished[job.loop].append((job.done, outcome))
        for loop, outcomes in finished.items():
            try:
                loop.call_soon_threadsafe(_deliver, outcomes)
            except RuntimeError:
                log.warning("a log's writes finished after its event loop closed")


def _deliver(outcomes: list[tuple[Done, Outcome]]) -> None:
    for done, outcome in outcomes:
        # One log's fault must not leave the others' writers waiting.
        try:
            done(outcome)
        except Exception:
            log.exception("settling a log's write failed")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def cut_back(fd: int, size: int) -> None:
    os.ftruncate(fd, size)
    os.fsync(fd)


def _write_batch(fd: int, size: int, datas: Sequence[bytes]) -> Written:
    try:
        write_all(fd, b"".join(datas))
    except OSError as failure:
        first = failure
    else:
        return Written([None] * len(datas), size + sum(map(len, datas)), None)
    try:
        cut_back(fd, size)
    except OSError as cut:
        return Written([first] * len(datas), size, cut)
    if len(datas) == 1:
        return Written([first], size, None)
    # Each alone now, so only an append that cannot be written fails.
    errors: list[OSError | None] = []
    for data in datas:
        try:
            write_all(fd, data)
        except OSError as exc:
            errors.append(exc)
            try:
                cut_back(fd, size)
            except OSError as cut:
                # The rest are refused as the log is: it takes no more.
                return Written(errors + [cut] * (len(datas) - len(errors)), size, cut)
        else:
            errors.append(None)
            size += len(data)
    return Written(errors, size, None)
