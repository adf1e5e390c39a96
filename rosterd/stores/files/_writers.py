"""The threads that write logs: a batch of appends to one log, written,
fsynced and (if that failed) cut back in one hop off the event loop.

One job is all of a batch's disk work, so a batch costs one thread hop
whatever becomes of it; its outcome comes back to the event loop as one
callback. The pool is the daemon's own, apart from anyio's worker threads:
a turn's appends to several logs wait for the disk side by side, and a
compilation or a document write moved off the loop never waits behind
them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import NamedTuple

# Logs written at once: fsyncs of different files overlap on the device,
# and more threads than this only queue in the kernel's journal.
WRITERS = 8

_pool: ThreadPoolExecutor | None = None


class Written(NamedTuple):
    """What became of a batch: per append, the error that kept it out of
    the file (``None``: it is durable); where the log's durable records end
    now; and the error of a cut back that failed, after which the file
    holds a failed write's bytes and the log takes no more."""

    errors: list[OSError | None]
    size: int
    cut: OSError | None


# A batch's outcome, as the event loop gets it.
Outcome = asyncio.Future[Written]


def write_batch(
    loop: asyncio.AbstractEventLoop,
    fd: int,
    size: int,
    datas: Sequence[bytes],
    done: Callable[[Outcome], None],
) -> None:
    """Append *datas* to the log open as *fd*, whose durable records end at
    *size*, off the loop; *done* gets the outcome on *loop*.

    The batch goes in with one write and one fsync. If that fails (a full
    disk, say), the file is cut back to *size* and each is written alone,
    so only an append that cannot be written fails."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(WRITERS, thread_name_prefix="rosterd-writer")
    job = partial(_write_batch, fd, size, list(datas))
    loop.run_in_executor(_pool, job).add_done_callback(done)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def cut_back(fd: int, size: int) -> None:
    os.ftruncate(fd, size)
    os.fsync(fd)


def _write_batch(fd: int, size: int, datas: list[bytes]) -> Written:
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
