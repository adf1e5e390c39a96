"""Every run a store can read, and each one it cannot.

A ``run.json`` emptied or edited by hand (or a database row likewise) hides
that run alone: the list, search and ``roster server runs list`` show the
others and name it, with why, once per listing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from ..protocol import RunInfo

log = logging.getLogger("rosterd.stores")


class UnreadableRun(msgspec.Struct, frozen=True):
    run: str
    reason: str


class RunList(msgspec.Struct, frozen=True):
    """The runs that could be read, oldest first, and those that could not."""

    runs: list[RunInfo]
    unreadable: list[UnreadableRun] = []


def run_list(runs: Sequence[RunInfo], unreadable: Sequence[UnreadableRun]) -> RunList:
    """*runs* oldest first, each of *unreadable* logged as a warning: the
    daemon's log, the inspector's and the CLI's stderr all say it."""
    for failure in unreadable:
        log.warning("run %s cannot be read: %s", failure.run, failure.reason)
    ordered = sorted(runs, key=lambda i: (i.created_at, i.id))
    return RunList(ordered, sorted(unreadable, key=lambda u: u.run))
