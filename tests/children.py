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


# A secret the test orgs name (``[connections.github] env``), for a daemon's
# environment: its children must not get it.
SECRET_ENV = {"GITHUB_TOKEN": "ghp_not-for-children"}


def only_child(pid: int) -> int:
    """The one process process *pid* started, a daemon's helper. Only the
    daemon speaks to systemd for the service: the child has no
    ``NOTIFY_SOCKET``; and it holds none of the secrets the org names."""
    (child,) = children(pid)
    names = {v.partition(b"=")[0] for v in environment(child)}
    assert names.isdisjoint({b"NOTIFY_SOCKET", *(n.encode() for n in SECRET_ENV)}), names
    assert b"PATH" in names
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
