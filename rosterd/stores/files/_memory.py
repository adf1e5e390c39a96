"""Worker memory: advisory notes, eligible from the next compilation on."""

from __future__ import annotations

from pathlib import Path

import anyio

from ..._ids import check_id
from ...compiler import MemoryIndex, MemoryItem, MemoryView
from .._indexing import index_notes
from ._jsonl import JsonlLog

__all__ = ("FileMemory",)


class FileMemory:
    """One append-only log per worker under ``memory/<worker>.jsonl``.

    Each worker's notes are held in a ``MemoryIndex`` (by word, by recency),
    kept up to date on every add, so a turn ranks only the notes that share
    its message's words.
    """

    def __init__(self, root: Path) -> None:
        self._root = root
        self._logs: dict[str, JsonlLog[MemoryItem]] = {}
        self._indexes: dict[str, MemoryIndex] = {}
        self._locks: dict[str, anyio.Lock] = {}

    def __repr__(self) -> str:
        return f"FileMemory({str(self._root)!r})"

    async def add(self, worker: str, text: str, channel: str | None, at: float) -> MemoryItem:
        index = await self._load(worker)
        # Numbering and appending under one lock: racing adds get distinct ids.
        async with self._locks.setdefault(worker, anyio.Lock()):
            item = MemoryItem(id=f"m-{len(index) + 1}", text=text, created_at=at, channel=channel)
            await self._logs[worker].append(item)
            index.add(item)
        return item

    async def items(self, worker: str) -> tuple[MemoryItem, ...]:
        """Every note of *worker*, oldest first."""
        return (await self._load(worker)).items()

    async def view(self, worker: str) -> MemoryView:
        """A snapshot: later additions do not change a compilation under way."""
        return (await self._load(worker)).snapshot()

    async def _load(self, worker: str) -> MemoryIndex:
        index = self._indexes.get(worker)
        if index is None:
            path = self._root / f"{check_id('worker', worker)}.jsonl"
            log, loaded = await JsonlLog.open(path, MemoryItem)
            built = await index_notes(loaded)
            if worker in self._indexes:  # another task loaded it meanwhile
                await log.aclose()
                return self._indexes[worker]
            self._logs[worker] = log
            index = self._indexes[worker] = built
        return index

    async def aclose(self) -> None:
        for log in self._logs.values():
            await log.aclose()
        self._logs.clear()
        self._indexes.clear()
