"""The leases this host holds on sessions and tasks, kept renewed.

A session turn or a task run goes on only while its lease is this host's.
One keeper renews every held lease a third of ``[daemon] lease_s`` apart;
a lease lost anyway (this host stalled past it and another took over) cuts
its turn or run short, since the other host now owns what happens next.

A warm session's turn holds its lease through its run (``turn``): taken
with the turn's first write, given up with its last, so that on a database
neither costs a round trip of its own.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio

from .._clock import Clock
from .._errors import ConflictError, StorageError
from ..stores import ActiveRun, State
from ._waits import Signal

log = logging.getLogger("rosterd.sessions")

# How often a turn waiting for another host's turn of its session looks again.
_WAIT_POLL_S = 0.05


class LeaseKeeper:
    """Takes, renews and gives up this host's leases."""

    def __init__(
        self,
        stores: State,
        holder: str,
        clock: Clock,
        lease_s: Callable[[], float],
    ) -> None:
        self._stores = stores
        self.holder = holder
        self._clock = clock
        self._lease_s = lease_s
        self._runs: dict[str, anyio.CancelScope] = {}
        self._tasks: dict[str, anyio.CancelScope] = {}
        # The warm turns' runs, which renew their leases themselves.
        self._turns: dict[str, ActiveRun] = {}
        # Each time runs cut off by a dead host's stop are found and marked
        # interrupted.
        self.recovered = Signal()

    def __repr__(self) -> str:
        return f"LeaseKeeper({self.holder!r}, {len(self._runs) + len(self._tasks)} held)"

    @asynccontextmanager
    async def run(self, run: str) -> AsyncIterator[None]:
        """Hold *run*'s lease for the block, waiting while another host has it:
        a session's turn, or a task or direct run under way (which a host
        starting meanwhile must not take for cut off)."""
        runs = self._stores.runs
        while True:
            now = self._clock()
            if await runs.lease(run, self.holder, now, now + self._lease_s()) is None:
                break
            # Another host is in a turn of this session: it ends, or its lease runs out.
            await anyio.sleep(_WAIT_POLL_S)
        try:
            async with self._held(self._runs, run, "run"):
                yield
        finally:
            with anyio.CancelScope(shield=True):
                await runs.release(run, self.holder)

    @asynccontextmanager
    async def turn(self, run: ActiveRun) -> AsyncIterator[None]:
        """Hold *run*'s lease for one turn of a warm session: its first write
        takes it, or raises ``StaleError`` when another host holds it or
        wrote since (the caller goes on under ``run``, which waits), and its
        ``conclude`` gives it up."""
        key = run.info.id
        now = self._clock()
        await run.hold(self.holder, now, now + self._lease_s())
        self._turns[key] = run
        try:
            async with self._held(self._runs, key, "run"):
                yield
        finally:
            self._turns.pop(key, None)
            with anyio.CancelScope(shield=True):
                await run.let_go(self.holder)

    def runs_task(self, task_id: str) -> bool:
        """Whether this host runs *task_id* now (within ``task``)."""
        return task_id in self._tasks

    @asynccontextmanager
    async def task(self, task_id: str) -> AsyncIterator[None]:
        """Keep the lease ``claim`` gave this host on *task_id* for the block."""
        try:
            async with self._held(self._tasks, task_id, "task"):
                yield
        finally:
            with anyio.CancelScope(shield=True):
                await self._stores.tasks.release(task_id, self.holder)

    @asynccontextmanager
    async def _held(
        self, held: dict[str, anyio.CancelScope], key: str, kind: str
    ) -> AsyncIterator[None]:
        with anyio.CancelScope() as scope:
            held[key] = scope
            try:
                yield
            finally:
                held.pop(key, None)
        if scope.cancelled_caught:
            raise ConflictError(f"{kind} {key!r}: this host lost its lease to another host")

    async def keep(self) -> None:
        """Renew every held lease until cancelled."""
        while True:
            await self._clock.sleep(self._lease_s() / 3)
            try:
                await self._renew()
                # Runs whose host died while another host serves on.
                if await self._stores.runs.recover(self._clock()):
                    self.recovered.notify()
            except StorageError as exc:
                # Unreachable store: the next round tries again. Should
                # another host take a lease over meanwhile, this host's
                # writes fail as well, so none lands after the other's.
                log.warning("could not renew leases: %s", exc)

    async def _renew(self) -> None:
        until = self._clock() + self._lease_s()
        for run, scope in list(self._runs.items()):
            now = self._clock()
            turn = self._turns.get(run)
            if turn is not None:
                kept = await turn.renew(self.holder, until)
            else:
                kept = await self._stores.runs.lease(run, self.holder, now, until) is None
            if not kept:
                log.error("run %s: lease lost to another host; cutting it short", run)
                scope.cancel()
        for task_id, scope in list(self._tasks.items()):
            if not await self._stores.tasks.renew(task_id, self.holder, until):
                log.error("task %s: lease lost to another host; cutting its run", task_id)
                scope.cancel()
