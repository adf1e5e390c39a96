"""Worker memory: advisory notes, eligible from the next compilation on."""

from __future__ import annotations

from pathlib import Path

import anyio

from .._ids import check_id
from ..compiler import MemoryItem
from ._files import JsonlLog

__all__ = ("MemoryStore",)


class MemoryStore:
    """One append-only log per worker under ``memory/<worker>.jsonl``."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._logs: dict[str, JsonlLog[MemoryItem]] = {}
        self._items: dict[str, list[MemoryItem]] = {}
        self._locks: dict[str, anyio.Lock] = {}

    def __repr__(self) -> str:
        return f"MemoryStore({str(self._root)!r})"

    async def add(self, worker: str, text: str, channel: str | None, at: float) -> MemoryItem:
        items = await self._load(worker)
        # Numbering and appending under one lock: racing adds get distinct ids.
        async with self._locks.setdefault(worker, anyio.Lock()):
            item = MemoryItem(id=f"m-{len(items) + 1}", text=text, created_at=at, channel=channel)
            await self._logs[worker].append(item)
            items.append(item)
        return item

    async def items(self, worker: str) -> tuple[MemoryItem, ...]:
        """A snapshot: later additions do not change a compilation under way."""
        return tuple(await self._load(worker))

    async def _load(self, worker: str) -> list[MemoryItem]:
        items = self._items.get(worker)
        if items is None:
            path = self._root / f"{check_id('worker', worker)}.jsonl"
            log, loaded = await JsonlLog.open(path, MemoryItem)
            if worker in self._items:  # another task loaded it meanwhile
                await log.aclose()
                return self._items[worker]
            self._logs[worker] = log
            items = self._items[worker] = loaded
        return items

    async def aclose(self) -> None:
        for log in self._logs.values():
            await log.aclose()
        self._logs.clear()
        self._items.clear()
