"""A daemon's child processes, as /proc shows them: which they are, what
environment they got, and when one ends."""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def environment(pid: int) -> list[bytes]:
    """Process *pid*'s environment, ``NAME=value`` each."""
    return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


def only_child(pid: int) -> int:
    """The one process process *pid* started, a daemon's helper. Only the
    daemon speaks to systemd for the service: the child has no
    ``NOTIFY_SOCKET``."""
    (child,) = children(pid)
    assert not any(v.startswith(b"NOTIFY_SOCKET=") for v in environment(child))
    return child


def children(pid: int) -> list[int]:
    """The processes process *pid* started that still run."""
    tasks = Path(f"/proc/{pid}/task")
    return [int(c) for task in tasks.iterdir() for c in (task / "children").read_text().split()]


@contextmanager
def ending(pid: int) -> Iterator[Callable[[], bool]]:
    """Whether process *pid* (not a child of ours) ended, within 20 s."""
    handle = os.pidfd_open(pid)
    try:
        yield lambda: bool(select.select([handle], [], [], 20)[0])
    finally:
        os.close(handle)


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """Process *pid* stopped (SIGSTOP) until the block ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
