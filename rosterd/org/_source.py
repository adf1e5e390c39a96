"""The org in force: the last good snapshot of the org directory.

A snapshot is never changed in place; a reload swaps in a new one, so a
session holding the old snapshot keeps it, and new sessions, tasks and runs
read ``current()``. A broken edit (bad TOML, an unknown key, a missing
file) keeps the snapshot in force and is kept as ``error`` until the files
load again.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread

from .._errors import ConfigError, RosterError
from ._load import identity_path, load_org, purpose_path
from ._org import Org

log = logging.getLogger("rosterd.config")

_Stamps = dict[str, tuple[int, int]]


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
        org = await anyio.to_thread.run_sync(load_org, root)
        return cls(root, org, await anyio.to_thread.run_sync(_stamps, _files(root, org)), clock)

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
        return now != {key: self._stamps[key] for key in map(str, paths) if key in self._stamps}

    async def reload(self) -> Org | None:
        """Read the files again, off the loop: the new snapshot, or ``None``
        when they do not load (``error`` says why; the old snapshot stays)."""
        async with self._lock:
            try:
                org = await anyio.to_thread.run_sync(load_org, self.root)
            except RosterError as exc:
                if str(exc) != self.error:
                    log.error("org edit rejected, keeping the last good config: %s", exc)
                self.error = str(exc)
                self._paths = _files(self.root, self._org)
                if isinstance(exc, ConfigError) and Path(exc.path) not in self._paths:
                    # A file the edit lacks (a new worker's identity) or
                    # has wrong: its fix is a change, seen by every check.
                    self._paths.append(Path(exc.path))
                self._stamps = await anyio.to_thread.run_sync(_stamps, self._paths)
                return None
            self._org = org
            self._paths = _files(self.root, org)
            self._stamps = await anyio.to_thread.run_sync(_stamps, self._paths)
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
    """Modification time and size of each of *paths* that exists."""
    stamps: _Stamps = {}
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            continue
        stamps[str(path)] = (info.st_mtime_ns, info.st_size)
    return stamps
