"""The last compiled prefix of each (worker, channel), in table ``prefixes``."""

from __future__ import annotations

import msgspec

from ..._ids import check_id
from ...compiler import PrefixState
from ._db import Database, encode

_prefix = msgspec.json.Decoder(PrefixState)

# One row on the primary key (worker, channel).
_GET = "SELECT record FROM prefixes WHERE worker = %s AND channel = %s"
_PUT = (
    "INSERT INTO prefixes (worker, channel, record) VALUES (%s, %s, %s)"
    " ON CONFLICT (worker, channel) DO UPDATE SET record = excluded.record"
)

_Key = tuple[str, str]


class PostgresPrefixes:
    """One row per (worker, channel); ``''`` is the channel of direct runs.

    Within a session only the time moves on, which is not worth a write a
    turn: this host keeps the newer state it did not write beside the row
    it stands for, and gives it back for as long as the row is unchanged.
    Another host's write changes the row, and then the row is what counts.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._rows: dict[_Key, str] = {}
        self._states: dict[_Key, PrefixState] = {}

    def __repr__(self) -> str:
        return f"PostgresPrefixes({self._db.where!r})"

    async def get(
        self, worker: str, channel: str | None, *, cached: bool = False
    ) -> PrefixState | None:
        """The pair's prefix; *cached*: as this host holds it, if it does (the
        turn's first write checks its row is unchanged, see ``row``)."""
        key = _key(worker, channel)
        if cached and key in self._rows:
            return self._states[key]
        row = await self._db.fetchone("read a prefix", _GET, key)
        if row is None:
            return None
        record: str = row[0]
        if self._rows.get(key) != record:
            self._rows[key] = record
            self._states[key] = self._db.decode(_prefix, record)
        return self._states[key]

    async def put(self, worker: str, channel: str | None, state: PrefixState) -> None:
        key = _key(worker, channel)
        # A turn reads its prefix just before it puts the next: that read
        # decides whether the row needs a write (a new run or new
        # boundaries), without reading the row again.
        previous = self._states.get(key) if key in self._rows else await self.get(worker, channel)
        if previous is None or previous.run != state.run or previous.boundaries != state.boundaries:
            record = encode(state)
            async with self._db.connection("write a prefix") as conn:
                await conn.execute(_PUT, (*key, record))
            self._rows[key] = record
        self._states[key] = state

    def row(self, worker: str, channel: str | None) -> str | None:
        """The pair's row as this host last read or wrote it (``None``: none known)."""
        return self._rows.get(_key(worker, channel))


def _key(worker: str, channel: str | None) -> _Key:
    check_id("worker", worker)
    return worker, "" if channel is None else check_id("channel", channel)
