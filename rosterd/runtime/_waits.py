"""Answering once something settles: the waits ``task.get`` and
``runs.show`` offer, so a client asks once instead of again and again."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

_T = TypeVar("_T")


class Signal:
    """Wakes everyone waiting for the next change: an event set and
    replaced at each change."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def __repr__(self) -> str:
        return "Signal()"

    def notify(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    def next(self) -> anyio.Event:
        """The event the next change sets. Taken before looking, so that a
        change while looking still wakes the looker."""
        return self._event


async def settled(
    look: Callable[[], Awaitable[_T]],
    done: Callable[[_T], bool],
    changes: Signal,
    wait_s: float,
    *,
    again_s: float,
    stopping: Callable[[], bool],
) -> _T:
    """What *look* finds once *done* holds for it; what it finds when
    *wait_s* ran out first, or once *stopping* holds. Looks again at each
    change *changes* signals, and every *again_s* for the changes it does
    not (another host's, on a shared store). Only the waits between looks
    run out: a look cut off mid-statement would cost its database
    connection."""
    deadline = anyio.current_time() + wait_s
    while not stopping():
        woken = changes.next()
        found = await look()
        left = deadline - anyio.current_time()
        if done(found) or left <= 0:
            return found
        with anyio.move_on_after(min(again_s, left)):
            await woken.wait()
    return await look()
