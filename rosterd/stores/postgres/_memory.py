"""Worker memory in the database: advisory notes, eligible from the next
compilation on, whichever host added them."""

from __future__ import annotations

import anyio
import msgspec

from ..._ids import check_id
from ...compiler import MemoryIndex, MemoryItem, MemoryView
from .._indexing import index_notes
from ._db import Database, encode

__all__ = ("PostgresMemory",)

_item = msgspec.json.Decoder(MemoryItem)

# A note takes m-<n> by moving its worker's row on; the note is inserted in
# the same transaction, so racing adds (from any host) wait for each
# other's commit: n is distinct and note n is visible before n + 1 exists.
# That is what lets a host catch up by reading only n > the last it saw.
_TAKE_NUMBER = (
    "INSERT INTO memory_workers (worker, last_note) VALUES (%s, 1)"
    " ON CONFLICT (worker) DO UPDATE SET last_note = memory_workers.last_note + 1"
    " RETURNING last_note"
)
_INSERT = "INSERT INTO memory_notes (worker, n, record) VALUES (%s, %s, %s)"
# On the primary key (worker, n): what is new since n, never the history.
_AFTER = "SELECT n, record FROM memory_notes WHERE worker = %s AND n > %s ORDER BY n"


class _Notes:
    """One worker's index on this host, and the last note number it holds."""

    def __init__(self, index: MemoryIndex, last: int) -> None:
        self.index = index
        self.last = last


class PostgresMemory:
    """Notes in table ``memory_notes``; each worker's indexed on this host.

    The first read of a worker indexes all its notes (off the event loop);
    every later read first adds the notes other hosts added since, in one
    query on the primary key, so a turn costs what is new.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._notes: dict[str, _Notes] = {}
        # Held while a worker's index is loaded or caught up: two readers
        # must not add the same notes twice.
        self._locks: dict[str, anyio.Lock] = {}

    def __repr__(self) -> str:
        return f"PostgresMemory({self._db.where!r}, {len(self._notes)} workers indexed)"

    async def add(self, worker: str, text: str, channel: str | None, at: float) -> MemoryItem:
        check_id("worker", worker)
        async with self._db.transaction("add a note") as conn:
            cursor = await conn.execute(_TAKE_NUMBER, (worker,))
            row = await cursor.fetchone()
            assert row is not None  # RETURNING of an upsert always has its row
            n = int(row[0])
            item = MemoryItem(id=f"m-{n}", text=text, created_at=at, channel=channel)
            await conn.execute(_INSERT, (worker, n, encode(item)))
        notes = self._notes.get(worker)
        # Next in line: indexed now. Otherwise (another host's notes came
        # between) the next read catches up, this one included.
        if notes is not None and notes.last == n - 1:
            async with self._lock(worker):
                if notes.last == n - 1:
                    notes.index.add(item)
                    notes.last = n
        return item

    async def items(self, worker: str) -> tuple[MemoryItem, ...]:
        """Every note of *worker*, oldest first."""
        return (await self._current(worker)).items()

    async def view(self, worker: str) -> MemoryView:
        """A snapshot: later additions do not change a compilation under way."""
        return (await self._current(worker)).snapshot()

    def _lock(self, worker: str) -> anyio.Lock:
        return self._locks.setdefault(worker, anyio.Lock())

    async def _current(self, worker: str) -> MemoryIndex:
        """*worker*'s index, with every note committed so far."""
        check_id("worker", worker)
        async with self._lock(worker):
            notes = self._notes.get(worker)
            last = 0 if notes is None else notes.last
            rows = await self._db.fetchall("read notes", _AFTER, (worker, last))
            if notes is None:
                loaded = [self._db.decode(_item, row[1]) for row in rows]
                index = await index_notes(loaded)
                notes = self._notes[worker] = _Notes(index, int(rows[-1][0]) if rows else 0)
            else:
                for n, record in rows:
                    notes.index.add(self._db.decode(_item, record))
                    notes.last = int(n)
            return notes.index

    async def aclose(self) -> None:
        self._notes.clear()
