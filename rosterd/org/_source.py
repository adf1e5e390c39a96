"""The org in force: the last good snapshot of the org directory.

A snapshot is never changed in place; a reload swaps in a new one, so a
session holding the old snapshot keeps it, and new sessions, tasks and runs
read ``current()``. A broken edit (bad TOML, an unknown key, a missing
file) keeps the snapshot in force and is kept as ``error`` until the files
load again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread

from .._errors import ConfigError, RosterError
from ._load import Stamp, identity_path, load_org, purpose_path, stamp
from ._org import Org

log = logging.getLogger("rosterd.config")

# Per file of the org, its stamp from just before it was last read, or, if
# the last load failed before reaching it, from just after (None: not there).
_Stamps = dict[str, Stamp | None]


class OrgSource:
    """Loads the org directory and holds its current snapshot; see the module docstring."""

    def __init__(
        self, root: Path, org: Org, stamps: _Stamps, clock: Callable[[], float] = time.time
    ) -> None:
        self.root = root
        self._org = org
        # The files whose stamps ``changed()`` compares: those *org* was read
        # from, and after a broken edit the file it names too.
        self._paths = _files(root, org)
        self._stamps = stamps
        self._clock = clock
        self._lock = anyio.Lock()
        self.error: str | None = None
        self.generation = 1
        self.loaded_at = clock()

    @classmethod
    async def load(cls, root: Path, clock: Callable[[], float] = time.time) -> OrgSource:
        """The source of *root*; raises ``RosterError`` if its files do not load."""
        root = Path(await anyio.Path(root).resolve())
        stamps: _Stamps = {}
        org = await anyio.to_thread.run_sync(load_org, root, stamps)
        return cls(root, org, stamps, clock)

    def __repr__(self) -> str:
        return f"OrgSource({str(self.root)!r}, generation {self.generation})"

    def current(self) -> Org:
        return self._org

    async def changed(self, worker: str | None = None, channel: str | None = None) -> bool:
        """Whether a file of the org changed since it was last read: any of
        them, or with *worker*, only those a run of *worker* (in *channel*)
        reads: ``org.toml``, its identity and the channel's purpose. A run's
        check then costs three stats, not one per file of the org."""
        if worker is None:
            return await anyio.to_thread.run_sync(_stamps, self._paths) != self._stamps
        paths = [self.root / "org.toml", identity_path(self.root, worker)]
        if channel is not None:
            paths.append(purpose_path(self.root, channel))
        now = await anyio.to_thread.run_sync(_stamps, paths)
        return now != {key: self._stamps.get(key) for key in now}

    async def reload(self) -> Org | None:
        """Read the files again, off the loop: the new snapshot, or ``None``
        when they do not load (``error`` says why; the old snapshot stays)."""
        async with self._lock:
            # Each file is stamped before it is read: an edit landing after
            # that is a change at the next check, never taken as read.
            stamps: _Stamps = {}
            try:
                org = await anyio.to_thread.run_sync(load_org, self.root, stamps)
            except RosterError as exc:
                if str(exc) != self.error:
                    log.error("org edit rejected, keeping the last good config: %s", exc)
                self.error = str(exc)
                self._paths = _files(self.root, self._org)
                if isinstance(exc, ConfigError) and Path(exc.path) not in self._paths:
                    # A file the edit lacks (a new worker's identity) or
                    # has wrong: its fix is a change, seen by every check.
                    self._paths.append(Path(exc.path))
                # Files the failed load did not reach are stamped as they are now.
                now = await anyio.to_thread.run_sync(_stamps, self._paths)
                self._stamps = {key: stamps.get(key, now[key]) for key in now}
                return None
            self._org = org
            self._paths = _files(self.root, org)
            self._stamps = stamps
            self.error = None
            self.generation += 1
            self.loaded_at = self._clock()
            log.info("org reloaded (generation %d)", self.generation)
            return org


def _files(root: Path, org: Org) -> list[Path]:
    """Every file *org* was read from."""
    paths = [root / "org.toml"]
    paths += [identity_path(root, w) for w in org.workers]
    paths += [purpose_path(root, c) for c in org.channels]
    return paths


def _stamps(paths: list[Path]) -> _Stamps:
    """The stamp of each of *paths* now."""
    return {str(path): stamp(path) for path in paths}
