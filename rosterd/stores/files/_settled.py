"""``settled-runs.jsonl``: the runs a start need not look at again.

A run is settled once it ended, its final ``run.json`` durable and its logs
whole: no kill can leave anything of it to recover any more. A start looks
at every run the list does not hold (those still open, and those that ended
since they were listed) and lists the ones that ended, a batch at a time;
while it serves, the daemon lists the runs it ends a batch at a time, and
what is left of them when it stops cleanly. A run missing from the list is
only looked at once more: the list spares a start reading months of runs,
and never decides what a run holds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import anyio

from ..._errors import StorageError
from ._jsonl import JsonlLog
from ._reading import read_log

log = logging.getLogger("rosterd.stores")

# Runs ended while serving are listed this many at a time: one write and
# fsync per batch, not one per run, and a start after a kill looks at
# fewer than this many of them again.
SETTLED_BATCH = 1024


class SettledRuns:
    """The list, and the runs ended since it was last written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ended: list[str] = []

    def __repr__(self) -> str:
        return f"SettledRuns({str(self.path)!r}, {len(self._ended)} ended since)"

    async def load(self) -> set[str] | None:
        """The runs listed, a torn last line cut; ``None`` for a state
        written before there was a list: then every run is looked at."""
        if not await anyio.Path(self.path).exists():
            return None
        return set(await read_log(self.path, str, repair=True))

    async def add(self, runs: Sequence[str]) -> None:
        """List *runs*, durably; with none, the list is made if missing.
        The list only spares a start reading: if it cannot be written (a
        full disk), that is logged and the next start looks at them again,
        rather than a start or a stop failing over it."""
        try:
            # Shielded: a batch taken off is written, whatever its caller.
            with anyio.CancelScope(shield=True):
                settled, _ = await JsonlLog.open(self.path, str, lambda _: True)
                try:
                    if runs:
                        await settled.extend(runs)
                finally:
                    await settled.aclose()
        except StorageError as exc:
            log.warning(
                "could not list %d runs as settled (the next start looks at them): %s",
                len(runs),
                exc,
            )

    async def ended(self, run: str) -> None:
        """*run* ended while the daemon serves: listed with its batch."""
        self._ended.append(run)
        if len(self._ended) >= SETTLED_BATCH:
            await self.flush()

    async def flush(self) -> None:
        """List the runs ended since the last batch."""
        batch, self._ended = self._ended, []
        if batch:
            await self.add(batch)
