"""Watching the org directory: edits apply to the next session, never mid-session.

watchfiles reports changes promptly, so ``daemon.status`` shows a broken edit
as soon as it lands. Starting a session, task or direct run also checks the
files' stamps, so an edit saved just before is never missed. A broken edit
(bad TOML, an unknown key, a missing file) is reported and the last good org
stays. A scope over budget does not make an org broken: start and reload
accept the same orgs, and such scopes are listed (``over_budget``) while only
their own compilations fail.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import anyio
import anyio.to_thread
from watchfiles import Change, DefaultFilter, awatch

from .._errors import RosterError
from ..compiler import OverBudget, over_budget
from ..org import Org, identity_path, load_org, purpose_path
from ..sessions import Host

__all__ = ("OrgWatcher", "describe_over_budget")

log = logging.getLogger("rosterd.config")

_Stamps = dict[str, tuple[int, int]]


def describe_over_budget(problem: OverBudget) -> str:
    where = f"{problem.worker} {problem.surface}"
    where += f" #{problem.channel}" if problem.channel is not None else ""
    return (
        f"{where}: block {problem.block!r} is {problem.size} characters, "
        f"over its limit of {problem.limit}"
    )


class OrgWatcher:
    """Keeps ``host.org`` the last good snapshot of the org directory."""

    def __init__(self, root: Path, host: Host) -> None:
        self.root = root.resolve()
        self._host = host
        self._stamps = self._stat(host.org)
        self._lock = anyio.Lock()
        self.error: str | None = None
        self.over_budget: tuple[OverBudget, ...] = ()
        self.generation = 1
        self.loaded_at = host.clock()
        self._report(over_budget(host.org))

    def __repr__(self) -> str:
        return f"OrgWatcher({str(self.root)!r}, generation {self.generation})"

    async def run(self, stop: anyio.Event) -> None:
        async for _ in awatch(
            self.root, stop_event=stop, watch_filter=_OrgFiles(), debounce=200, step=50
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
            # A dry run of every scope: off the loop, as loading the files is.
            self._report(await anyio.to_thread.run_sync(over_budget, org))

    def _report(self, problems: tuple[OverBudget, ...]) -> None:
        """Log each scope over budget once, when it first shows up."""
        for problem in problems:
            if problem not in self.over_budget:
                log.error(
                    "scope over budget, its runs fail until fixed: %s",
                    describe_over_budget(problem),
                )
        self.over_budget = problems

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


class _OrgFiles(DefaultFilter):
    """TOML and Markdown files, less what watchfiles ignores by default.

    An editor's lock, swap and backup files (``.#identity.md``,
    ``.identity.md.swp``, ``identity.md~``) are not edits of the org.
    """

    def __call__(self, change: Change, path: str) -> bool:
        return path.endswith((".toml", ".md")) and super().__call__(change, path)
