"""Watching the org directory: edits apply to the next session, never mid-session.

watchfiles reports changes promptly, so a broken edit is logged as soon as
it lands. ``daemon.status`` also checks every file's stamps, and starting a
session, task or direct run those of the files it reads (``org.toml``, the
worker's identity, the channel's purpose), so an edit saved just before is
never missed, and a run's check does not grow with the org. A broken edit
(bad TOML, an unknown key, a missing file) is reported and the last good org
stays. A scope over budget does not make an org broken: start and reload
accept the same orgs, and such scopes are listed (``over_budget``) while only
their own compilations fail.
"""

from __future__ import annotations

import logging

import anyio
import anyio.to_thread
from watchfiles import Change, DefaultFilter, awatch

from ..compiler import OverBudget, over_budget
from ..org import OrgSource
from ..protocol import describe_over_budget

log = logging.getLogger("rosterd.config")


class OrgWatcher:
    """Has *source* reload when the org's files change, and lists the scopes over budget."""

    def __init__(self, source: OrgSource) -> None:
        self.source = source
        self.over_budget: tuple[OverBudget, ...] = ()
        self._report(over_budget(source.current()))

    def __repr__(self) -> str:
        return f"OrgWatcher({self.source!r})"

    async def run(self, stop: anyio.Event) -> None:
        async for _ in awatch(
            self.source.root, stop_event=stop, watch_filter=_OrgFiles(), debounce=200, step=50
        ):
            await self.reload()

    async def refresh(self, worker: str | None = None, channel: str | None = None) -> None:
        """Reload now if any watched file changed since the last load (with
        *worker*: any file its runs in *channel* read)."""
        if await self.source.changed(worker, channel):
            await self.reload()

    async def reload(self) -> None:
        org = await self.source.reload()
        if org is None:
            return
        # A dry run of every scope: off the loop, as loading the files is.
        problems = await anyio.to_thread.run_sync(over_budget, org)
        # A reload that started later may have finished first: report only what is in force.
        if org is self.source.current():
            self._report(problems)

    def _report(self, problems: tuple[OverBudget, ...]) -> None:
        """Log each scope over budget once, when it first shows up."""
        for problem in problems:
            if problem not in self.over_budget:
                log.error(
                    "scope over budget, its runs fail until fixed: %s",
                    describe_over_budget(problem),
                )
        self.over_budget = problems


class _OrgFiles(DefaultFilter):
    """TOML and Markdown files, less what watchfiles ignores by default.

    An editor's lock, swap and backup files (``.#identity.md``,
    ``.identity.md.swp``, ``identity.md~``) are not edits of the org.
    """

    def __call__(self, change: Change, path: str) -> bool:
        return path.endswith((".toml", ".md")) and super().__call__(change, path)
