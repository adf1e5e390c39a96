"""The daemon's clock: the time it reads and the time its loops sleep on.

Idle expiry, leases and the loops that check them all take one ``Clock``,
so a test that injects its own clock drives them in virtual time: moving
that clock forward is what wakes the reaper and the lease keeper, never
the wall clock (trio's ``MockClock`` is the model). The IRC bridge's pace
and budgets take one too, the event loop's by default.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio


class Clock(Protocol):
    """Seconds since the epoch, and a sleep measured on the same clock."""

    def __call__(self) -> float: ...

    async def sleep(self, seconds: float) -> None:
        """Return once *seconds* have passed on this clock."""
        ...


class _SleepsOnTheLoop:
    """A real clock: whatever it reads, its sleeps are the event loop's."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class SystemClock(_SleepsOnTheLoop):
    """The wall clock."""

    def __call__(self) -> float:
        return time.time()


class LoopClock(_SleepsOnTheLoop):
    """The event loop's clock, which never jumps: for intervals and pacing,
    which a step of the wall clock must neither stretch nor cut short."""

    def __call__(self) -> float:
        return anyio.current_time()


SYSTEM_CLOCK = SystemClock()
LOOP_CLOCK = LoopClock()
