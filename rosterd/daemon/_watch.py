"""Watching the org directory: edits apply to the next session, never mid-session.

watchfiles reports changes promptly, so ``daemon.status`` shows a broken edit
as soon as it lands. Starting a session, task or direct run also checks the
files' stamps, so an edit saved just before is never missed. A broken edit
(bad TOML, a file over budget) is reported and the last good org stays.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import anyio
import anyio.to_thread
from watchfiles import Change, awatch

from .._errors import RosterError
from ..compiler import RunMeta, compile_system
from ..org import Org, identity_path, load_org, purpose_path
from ..sessions import Host

__all__ = ("OrgWatcher", "validate_org")

log = logging.getLogger("rosterd.config")

_Stamps = dict[str, tuple[int, int]]


def validate_org(org: Org) -> None:
    """Dry-run the system part of every scope the org allows."""
    meta = RunMeta(run="validate", turn=0, now=0.0)
    for scope in org.scopes():
        compile_system(org, scope, meta)


class OrgWatcher:
    """Keeps ``host.org`` the last good snapshot of the org directory."""

    def __init__(self, root: Path, host: Host) -> None:
        self.root = root.resolve()
        self._host = host
        self._stamps = self._stat(host.org)
        self._lock = anyio.Lock()
        self.error: str | None = None
        self.generation = 1
        self.loaded_at = host.clock()

    def __repr__(self) -> str:
        return f"OrgWatcher({str(self.root)!r}, generation {self.generation})"

    async def run(self, stop: anyio.Event) -> None:
        async for _ in awatch(
            self.root, stop_event=stop, watch_filter=_org_file, debounce=200, step=50
        ):
            await self.reload()

    async def refresh(self) -> None:
        """Reload now if any watched file changed since the last load."""
        if await anyio.to_thread.run_sync(self._stat, self._host.org) != self._stamps:
            await self.reload()

    async def reload(self) -> None:
        async with self._lock:
            try:
                org = await anyio.to_thread.run_sync(load_org, self.root)
                validate_org(org)
            except RosterError as exc:
                if str(exc) != self.error:
                    log.error("org edit rejected, keeping the last good config: %s", exc)
                self.error = str(exc)
                self._stamps = await anyio.to_thread.run_sync(self._stat, self._host.org)
                return
            self._host.org = org
            self._stamps = await anyio.to_thread.run_sync(self._stat, org)
            self.error = None
            self.generation += 1
            self.loaded_at = self._host.clock()
            log.info("org reloaded (generation %d)", self.generation)

    def _stat(self, org: Org) -> _Stamps:
        paths = [self.root / "org.toml"]
        paths += [identity_path(self.root, w) for w in org.workers]
        paths += [purpose_path(self.root, c) for c in org.channels]
        stamps: _Stamps = {}
        for path in paths:
            try:
                info = os.stat(path)
            except OSError:
                continue
            stamps[str(path)] = (info.st_mtime_ns, info.st_size)
        return stamps


def _org_file(change: Change, path: str) -> bool:
    return path.endswith((".toml", ".md"))
