"""What every backend's ``MemoryStore`` does with a worker's notes alike:
number them, index them on the first read, and decide which note a
retirement may take."""

from __future__ import annotations

import gc
from collections.abc import Collection, Iterable

import anyio.to_thread

from .._errors import NotFoundError
from ..compiler import MemoryIndex, MemoryItem, Retirement


async def index_notes(
    notes: Iterable[MemoryItem], retirements: Iterable[Retirement] = ()
) -> MemoryIndex:
    """The index of *notes*, less those retired, built off the event loop
    (months of notes take a while).

    The index lives as long as the daemon, as do the modules loaded before
    it: out of the collector's full walks, which otherwise hold the GIL for
    tens of ms every so often.
    """
    index = await anyio.to_thread.run_sync(MemoryIndex, notes, retirements)
    gc.freeze()
    return index


def new_note(
    n: int, text: str, channel: str | None, at: float, run: str | None, turn: int | None
) -> MemoryItem:
    """Note number *n* of a worker: the worker's own when a run wrote it."""
    return MemoryItem(
        id=f"m-{n}",
        text=text,
        created_at=at,
        channel=channel,
        author="operator" if run is None else "worker",
        run=run,
        turn=turn,
    )


def retirable(
    index: MemoryIndex, retirement: Retirement, channels: Collection[str | None] | None
) -> MemoryItem:
    """The live note *retirement* names, if its channel is in *channels*
    (any channel without them).

    A note out of scope is answered as one that does not exist, so the
    answer tells a worker nothing about notes it may not see.
    """
    item = index.live(retirement.note)
    if item is None or (channels is not None and item.channel not in channels):
        raise NotFoundError("note", retirement.note)
    return item
