"""What every backend does with a worker's notes alike: number them, index
them on the first read, decide which note a retirement may take, and answer
every read from the index."""

from __future__ import annotations

import gc
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping

import anyio.to_thread

from .._errors import NotFoundError
from ..compiler import MemoryIndex, MemoryItem, MemoryView, Retirement
from ._interface import MemoryStore


class IndexedMemory(MemoryStore, ABC):
    """A ``MemoryStore`` that answers every read from one ``MemoryIndex`` per
    worker. A backend says how it numbers and keeps a new note, how it keeps a
    retirement, and how it brings a worker's index up to date.

    Derived from the Protocol, not only shaped like it: the signatures
    spelled here are checked against it where they are written, and its
    docstrings are theirs."""

    async def add(
        self,
        worker: str,
        text: str,
        channel: str | None,
        at: float,
        *,
        run: str | None = None,
        turn: int | None = None,
    ) -> MemoryItem:
        return await self._append(worker, lambda n: new_note(n, text, channel, at, run, turn))

    async def items(self, worker: str) -> tuple[MemoryItem, ...]:
        return (await self._index(worker)).items()

    async def retirements(self, worker: str) -> Mapping[str, Retirement]:
        return dict((await self._index(worker)).retirements())

    async def view(self, worker: str, *, cached: bool = False) -> MemoryView:
        return (await self._index(worker, cached=cached)).snapshot()

    @abstractmethod
    async def _append(self, worker: str, note: Callable[[int], MemoryItem]) -> MemoryItem:
        """Keep ``note(n)``, durably, where *n* is the worker's next number."""

    @abstractmethod
    async def _index(self, worker: str, *, cached: bool = False) -> MemoryIndex:
        """*worker*'s index, holding every note kept so far (*cached*: as
        this host holds it, if it does)."""


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
