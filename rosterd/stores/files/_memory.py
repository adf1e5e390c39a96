"""Worker memory: advisory notes, eligible from the next compilation on."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import anyio

from ..._ids import check_id
from ...compiler import MemoryIndex, MemoryItem, MemoryView, Retirement
from .._indexing import index_notes, new_note, retirable
from ._jsonl import JsonlLog, read_log

__all__ = ("FileMemory",)


class _Notes:
    """One worker's logs, its index, and the lock its writes take."""

    def __init__(self, notes: JsonlLog[MemoryItem], retired: Path, index: MemoryIndex) -> None:
        self.notes = notes
        self.index = index
        # Opened by the first retirement: most workers never retire a note.
        self.retired_path = retired
        self.retired: JsonlLog[Retirement] | None = None
        # Numbering and appending under one lock: racing adds get distinct ids.
        self.lock = anyio.Lock()

    async def retire(self, retirement: Retirement) -> None:
        if self.retired is None:
            self.retired, _ = await JsonlLog.open(self.retired_path, Retirement)
        await self.retired.append(retirement)

    async def aclose(self) -> None:
        await self.notes.aclose()
        if self.retired is not None:
            await self.retired.aclose()


class FileMemory:
    """One append-only log of notes per worker under ``memory/<worker>.jsonl``
    and one of retirements under ``memory/retired/<worker>.jsonl``.

    Each worker's notes are held in a ``MemoryIndex`` (by word, by recency),
    kept up to date on every add and retirement, so a turn ranks only the
    notes that share its message's words.
    """

    def __init__(self, root: Path) -> None:
        self._root = root
        self._workers: dict[str, _Notes] = {}

    def __repr__(self) -> str:
        return f"FileMemory({str(self._root)!r})"

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
        notes = await self._load(worker)
        async with notes.lock:
            item = new_note(len(notes.index) + 1, text, channel, at, run, turn)
            await notes.notes.append(item)
            notes.index.add(item)
        return item

    async def retire(
        self, worker: str, retirement: Retirement, channels: Collection[str | None] | None = None
    ) -> MemoryItem:
        notes = await self._load(worker)
        async with notes.lock:
            item = retirable(notes.index, retirement, channels)
            await notes.retire(retirement)
            notes.index.retire(retirement)
        return item

    async def items(self, worker: str) -> tuple[MemoryItem, ...]:
        """Every note of *worker*, oldest first, retired ones included."""
        return (await self._load(worker)).index.items()

    async def retirements(self, worker: str) -> Mapping[str, Retirement]:
        return dict((await self._load(worker)).index.retirements())

    async def view(self, worker: str) -> MemoryView:
        """A snapshot: later additions do not change a compilation under way."""
        return (await self._load(worker)).index.snapshot()

    async def _load(self, worker: str) -> _Notes:
        notes = self._workers.get(worker)
        if notes is None:
            name = f"{check_id('worker', worker)}.jsonl"
            log, loaded = await JsonlLog.open(self._root / name, MemoryItem)
            retired = self._root / "retired" / name
            retirements = await read_log(retired, Retirement)
            built = _Notes(log, retired, await index_notes(loaded, retirements))
            if worker in self._workers:  # another task loaded it meanwhile
                await built.aclose()
                return self._workers[worker]
            notes = self._workers[worker] = built
        return notes

    async def aclose(self) -> None:
        for notes in self._workers.values():
            await notes.aclose()
        self._workers.clear()
