"""Worker memory: advisory notes, eligible from the next compilation on."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import anyio

from ..._ids import check_id
from ...compiler import MemoryIndex, MemoryItem, Retirement
from .._indexing import index_notes, retirable
from .._interface import MemoryStore
from ._jsonl import JsonlLog, id_number
from ._opened import Opened
from ._reading import read_log


class _Notes:
    """One worker's logs, its index, and how its writes are numbered."""

    def __init__(self, notes: JsonlLog[MemoryItem], retired: Path, index: MemoryIndex) -> None:
        self.notes = notes
        self.index = index
        # Opened by the first retirement: most workers never retire a note.
        self.retired_path = retired
        self.retired: JsonlLog[Retirement] | None = None
        # Numbers are taken as notes are placed in the log, before their
        # write: racing adds get distinct ids and share the write. Counted
        # on from the highest kept, not from how many notes there are: a
        # note whose write failed left its number unused, and the notes
        # after it must not have theirs handed out again after a restart.
        self.numbered = max((id_number(item.id, "m") for item in index.items()), default=0)
        # A retirement checks the index and appends under it: two racing
        # retirements of one note cannot both be taken.
        self.retiring = anyio.Lock()

    async def retire(self, retirement: Retirement) -> None:
        if self.retired is None:
            self.retired, _ = await JsonlLog.open(self.retired_path, Retirement)
        await self.retired.append(retirement)

    async def aclose(self) -> None:
        await self.notes.aclose()
        if self.retired is not None:
            await self.retired.aclose()


class FileMemory(MemoryStore, Opened[_Notes]):
    """One append-only log of notes per worker under ``memory/<worker>.jsonl``
    and one of retirements under ``memory/retired/<worker>.jsonl``.

    Each worker's notes are held in a ``MemoryIndex`` (by word, by recency),
    kept up to date on every add and retirement, so a turn ranks only the
    notes that share its message's words.
    """

    async def retire(
        self, worker: str, retirement: Retirement, channels: Collection[str | None] | None = None
    ) -> MemoryItem:
        notes = await self._get(worker)
        async with notes.retiring:
            item = retirable(notes.index, retirement, channels)
            await notes.retire(retirement)
            notes.index.retire(retirement)
        return item

    async def _append(self, worker: str, note: Callable[[int], MemoryItem]) -> MemoryItem:
        notes = await self._get(worker)
        notes.numbered += 1
        item = note(notes.numbered)
        await notes.notes.append(item, lambda: notes.index.add(item))
        return item

    async def _index(self, worker: str, *, cached: bool = False) -> MemoryIndex:
        return (await self._get(worker)).index

    async def _open(self, worker: str) -> _Notes:
        name = f"{check_id('worker', worker)}.jsonl"
        log, loaded = await JsonlLog.open(self._root / name, MemoryItem)
        retired = self._root / "retired" / name
        retirements = await read_log(retired, Retirement)
        return _Notes(log, retired, await index_notes(loaded, retirements))
