"""Worker memory in the database: advisory notes, eligible from the next
compilation on, whichever host added them, until one retires them."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import anyio
import msgspec

from ..._ids import check_id
from ...compiler import MemoryIndex, MemoryItem, Retirement
from .._indexing import index_notes, retirable
from .._interface import MemoryStore
from ._db import Database, encode

_item = msgspec.json.Decoder(MemoryItem)
_retirement = msgspec.json.Decoder(Retirement)

# A note takes m-<n> by moving its worker's row on; the note is inserted in
# the same transaction, so racing adds (from any host) wait for each
# other's commit: n is distinct and note n is visible before n + 1 exists.
# That is what lets a host catch up by reading only n > the last it saw.
# Retirements are numbered the same way, on a counter of their own.
_TAKE_NUMBER = (
    "INSERT INTO memory_workers (worker, last_note) VALUES (%s, 1)"
    " ON CONFLICT (worker) DO UPDATE SET last_note = memory_workers.last_note + 1"
    " RETURNING last_note"
)
_INSERT = "INSERT INTO memory_notes (worker, n, record) VALUES (%s, %s, %s)"
# A retired note exists, so its worker's row does too.
_TAKE_RETIREMENT = (
    "UPDATE memory_workers SET last_retired = last_retired + 1 WHERE worker = %s"
    " RETURNING last_retired"
)
_INSERT_RETIREMENT = "INSERT INTO memory_retirements (worker, n, record) VALUES (%s, %s, %s)"
# On the primary keys (worker, n): what is new since the last note and the
# last retirement seen, in one snapshot, notes first.
_AFTER = (
    "SELECT 0, n, record FROM memory_notes WHERE worker = %s AND n > %s"
    " UNION ALL"
    " SELECT 1, n, record FROM memory_retirements WHERE worker = %s AND n > %s"
    " ORDER BY 1, 2"
)


@dataclass(slots=True)
class _Notes:
    """One worker's index on this host, and the last note and retirement
    numbers it holds."""

    index: MemoryIndex
    last: int
    last_retired: int
    # The number of the read that last caught this index up (see ``_current``).
    read: int = 0


class PostgresMemory(MemoryStore):
    """Notes in table ``memory_notes``, retirements in ``memory_retirements``;
    each worker's indexed on this host.

    The first read of a worker indexes all its notes (off the event loop);
    every later read first adds the notes and retirements other hosts added
    since, in one query on the primary keys, so a turn costs what is new. A
    warm turn reads the index as it is (``cached``), and its first write
    checks the worker's numbers (``known``) are still the last.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._notes: dict[str, _Notes] = {}
        # Held while a worker's index is loaded or caught up: two readers
        # must not add the same notes twice.
        self._locks: dict[str, anyio.Lock] = {}
        # Per worker, how many catch-up reads have begun on this host.
        self._reads: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"PostgresMemory({self._db.where!r}, {len(self._notes)} workers indexed)"

    async def _append(self, worker: str, note: Callable[[int], MemoryItem]) -> MemoryItem:
        check_id("worker", worker)
        async with self._db.transaction("add a note") as conn:
            cursor = await conn.execute(_TAKE_NUMBER, (worker,))
            row = await cursor.fetchone()
            assert row is not None  # RETURNING of an upsert always has its row
            n = int(row[0])
            item = note(n)
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

    async def retire(
        self, worker: str, retirement: Retirement, channels: Collection[str | None] | None = None
    ) -> MemoryItem:
        # Two hosts retiring one note at once both append: the index keeps
        # the first, and the note is retired either way.
        notes = await self._current(worker)
        item = retirable(notes.index, retirement, channels)
        async with self._db.transaction("retire a note") as conn:
            cursor = await conn.execute(_TAKE_RETIREMENT, (worker,))
            row = await cursor.fetchone()
            assert row is not None  # the note exists, and so its worker's row
            n = int(row[0])
            await conn.execute(_INSERT_RETIREMENT, (worker, n, encode(retirement)))
        async with self._lock(worker):
            if notes.last_retired == n - 1:
                notes.index.retire(retirement)
                notes.last_retired = n
        return item

    async def _index(self, worker: str, *, cached: bool = False) -> MemoryIndex:
        notes = self._notes.get(worker) if cached else None
        return (notes or await self._current(worker)).index

    def known(self, worker: str) -> tuple[int, int] | None:
        """The last note and retirement numbers this host holds of *worker*;
        ``None`` if it holds none."""
        notes = self._notes.get(worker)
        return None if notes is None else (notes.last, notes.last_retired)

    def _lock(self, worker: str) -> anyio.Lock:
        return self._locks.setdefault(worker, anyio.Lock())

    async def _current(self, worker: str) -> _Notes:
        """*worker*'s notes, with every note and retirement committed so far."""
        check_id("worker", worker)
        begun = self._reads.get(worker, 0)
        async with self._lock(worker):
            notes = self._notes.get(worker)
            # A read that began after this call did, and has finished, saw
            # every commit this call must: readers waiting on the lock (a
            # worker's first turns in 200 sessions at once) share it
            # instead of each reading again, one after another.
            if notes is not None and notes.read > begun:
                return notes
            read = self._reads[worker] = self._reads.get(worker, 0) + 1
            last, last_retired = (0, 0) if notes is None else (notes.last, notes.last_retired)
            rows = await self._db.fetchall(
                "read notes", _AFTER, (worker, last, worker, last_retired)
            )
            added = [(int(n), self._db.decode(_item, r)) for kind, n, r in rows if kind == 0]
            retired = [
                (int(n), self._db.decode(_retirement, r)) for kind, n, r in rows if kind == 1
            ]
            if notes is None:
                index = await index_notes((item for _, item in added), (r for _, r in retired))
                notes = self._notes[worker] = _Notes(index, 0, 0)
            else:
                for _, item in added:
                    notes.index.add(item)
                for _, retirement in retired:
                    notes.index.retire(retirement)
            notes.last = added[-1][0] if added else notes.last
            notes.last_retired = retired[-1][0] if retired else notes.last_retired
            notes.read = read
            return notes

    async def aclose(self) -> None:
        self._notes.clear()
        self._reads.clear()
