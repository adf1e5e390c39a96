"""A start's warm-up: the notes and gates of each worker a restart left a
session open for, read and indexed before that session's next turn asks.

A worker's notes are indexed on first use, and months of them take seconds
to read and index (100,000 notes: about 2.5 s). Without the warm-up, the
first message after a restart waits that long. Only the workers with an
open session are warmed: they are the ones whose next turn is a reply in a
conversation under way, and a start then holds no more memory than was in
use before it. Every other worker's notes load on first use, as before.
"""

from __future__ import annotations

import logging
import time

from .._errors import NotFoundError, RosterError
from ..org import Surface
from ._host import Host

log = logging.getLogger("rosterd.sessions")


class WarmUp:
    """The workers to warm (``pending``, until each is done), and the warming."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self.pending: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"WarmUp({len(self.pending)} pending)"

    async def find(self) -> None:
        """Each worker of the org that a session in the store is open for,
        through one of its channels: those ``run`` warms."""
        host = self._host
        found: list[str] = []
        for scope in host.org.scopes():
            if scope.surface is not Surface.SESSION or scope.worker in found:
                continue
            assert scope.channel is not None  # a session's scope has one
            try:
                session = await host.runs.session_for(scope.worker, scope.channel)
                if session is not None and (await host.runs.info(session)).status == "open":
                    found.append(scope.worker)
            except NotFoundError:
                continue  # a pointer left to a run that is gone: no session
            except RosterError as exc:
                # Its first turn meets the same fault, and says it.
                log.warning("warm-up: no session of %s looked up: %s", scope.worker, exc)
        self.pending = tuple(found)

    async def run(self) -> None:
        """Read and index the notes and gates of each pending worker, one
        after another; a worker whose read fails is left to its first turn."""
        stores = self._host.stores
        while self.pending:
            worker = self.pending[0]
            start = time.perf_counter()
            try:
                view = await stores.memory.view(worker)
                await stores.gates.briefing_for(worker, None)
            except RosterError as exc:
                log.warning("warm-up: the notes of %s were not indexed: %s", worker, exc)
            else:
                count = len(view)
                log.info(
                    "warm-up: indexed %s's %d %s in %.2f s",
                    worker,
                    count,
                    "note" if count == 1 else "notes",
                    time.perf_counter() - start,
                )
            self.pending = self.pending[1:]
