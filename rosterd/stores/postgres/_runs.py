"""Runs in the database: info, trace, transcript, sessions' frozen state.

- ``runs``: one row per run, its ``RunInfo`` as the file's ``run.json`` holds it;
- ``run_context``: the trace, row ``n`` being line ``n`` of ``context.jsonl``;
- ``run_transcript``: every user turn, reply and failure, numbered the same way;
- ``session_states``: a session's frozen system part (``system.json``);
- ``session_pointers``: the session each (worker, channel) pair has open.

Every record is stored as the exact text the file backend writes on its
line, so ``export`` gives ``context.jsonl`` byte for byte. Line numbers
come from the database under the run's row lock, never from a count kept
here: a second host continuing a session goes on from the last line
whoever wrote it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager

import msgspec
import psycopg
import psycopg.errors

from ..._errors import NotFoundError
from ..._ids import check_id
from ...compiler import ContextRecord
from ...org import Surface
from ...protocol import RunInfo, TranscriptEntry
from .._open_run import OpenRun
from .._records import SessionState, cut_off, new_run_id
from ._db import Database, encode

__all__ = ("PostgresRun", "PostgresRuns")

log = logging.getLogger("rosterd.stores")

_info = msgspec.json.Decoder(RunInfo)
_record = msgspec.json.Decoder(ContextRecord)
_entry = msgspec.json.Decoder(TranscriptEntry)
_session = msgspec.json.Decoder(SessionState)

# Appends to one run take turns on its row: each reads the last line number
# in a statement that starts after the lock is granted, so it sees the
# previous append's rows whichever host made them. Counting the revision
# takes that lock (NO KEY UPDATE: other transactions' foreign-key checks,
# KEY SHARE, are not blocked).
_LOCK_RUN = "UPDATE runs SET revision = revision + 1 WHERE id = %s RETURNING revision"
_APPEND_CONTEXT = (
    "INSERT INTO run_context (run, n, turn, record)"
    " SELECT %(run)s, coalesce(max(n), 0) + 1, %(turn)s, %(record)s"
    " FROM run_context WHERE run = %(run)s"
)
_APPEND_TRANSCRIPT = (
    "INSERT INTO run_transcript (run, n, record)"
    " SELECT %(run)s, last.n + line.i, line.record"
    " FROM (SELECT coalesce(max(n), 0) AS n FROM run_transcript WHERE run = %(run)s) AS last,"
    " unnest(%(records)s::text[]) WITH ORDINALITY AS line (record, i)"
)
_WRITE_INFO = (
    "INSERT INTO runs (id, created_at, status, surface, record) VALUES (%s, %s, %s, %s, %s)"
    " ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at,"
    " status = excluded.status, surface = excluded.surface, record = excluded.record,"
    " revision = runs.revision + 1"
    " RETURNING revision"
)
# Taken when free, expired or already the holder's; either way the holder.
_LEASE = (
    "WITH taken AS ("
    " INSERT INTO leases (key, holder, until) VALUES (%(key)s, %(holder)s, %(until)s)"
    " ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, until = excluded.until"
    " WHERE leases.holder = excluded.holder OR leases.until <= %(now)s"
    " RETURNING holder)"
    " SELECT holder FROM taken"
    " UNION ALL SELECT holder FROM leases"
    " WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM taken)"
)
_RELEASE = "DELETE FROM leases WHERE key = %s AND holder = %s"
# Matches the partial index ``runs_open``: recovery reads the open runs only,
# however many have ever finished.
# A run that a live host holds a lease on is under way, not cut off.
OPEN_RUNS = (
    "SELECT record FROM runs WHERE status = 'open' AND surface <> %s"
    " AND NOT EXISTS (SELECT 1 FROM leases WHERE key = runs.id AND until > %s) ORDER BY id"
)
_CONTEXT = "SELECT record FROM run_context WHERE run = %s ORDER BY n"
_REVISION = "SELECT revision FROM runs WHERE id = %s"
_INTERRUPT = "UPDATE runs SET status = %s, record = %s WHERE id = %s AND status = 'open'"


class PostgresRun(OpenRun):
    """An open run: appends commit before they return, numbered by the database."""

    def __init__(
        self, store: PostgresRuns, info: RunInfo, last_turn: int = 0, revision: int = 0
    ) -> None:
        super().__init__(info, last_turn)
        self.store = store
        # The run's revision after this handle's last write (or its reading).
        self._revision = revision

    async def trace(self, record: ContextRecord) -> None:
        params = {"run": self.info.id, "turn": record.turn, "record": encode(record)}
        self._wrote(await self.store.append(self.info.id, "trace", _APPEND_CONTEXT, params))

    async def record(self, entry: TranscriptEntry) -> None:
        await self.record_many((entry,))

    async def record_many(self, entries: Sequence[TranscriptEntry]) -> None:
        """Append *entries* in one transaction: all of them or none."""
        if not entries:
            return
        params = {"run": self.info.id, "records": [encode(entry) for entry in entries]}
        self._wrote(await self.store.append(self.info.id, "record", _APPEND_TRANSCRIPT, params))

    async def end(self, info: RunInfo) -> None:
        """Write the run's final *info*."""
        self.info = info
        self._wrote(await self.store.write_revision(info))

    async def aclose(self) -> None:
        # Nothing is held between appends: each takes a pooled connection.
        return None

    async def stale(self) -> bool:
        return await self.store.revision(self.info.id) != self._revision

    def _wrote(self, revision: int) -> None:
        # A turn's trace and user entry are written side by side: keep the later.
        self._revision = max(self._revision, revision)


class PostgresRuns:
    """Runs and session pointers over a pool of autocommit connections.

    *where* names the database in errors (the URL without its password).
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self.where = db.where

    def __repr__(self) -> str:
        return f"PostgresRuns({self.where!r})"

    def _failing(self, op: str) -> AbstractContextManager[None]:
        return self._db.failing(op)

    def new_id(self, prefix: str, now: float) -> str:
        return new_run_id(prefix, now)

    async def create(self, info: RunInfo) -> PostgresRun:
        await self.write_info(info)
        run, _ = await self.reopen(info)
        return run

    async def reopen(self, info: RunInfo) -> tuple[PostgresRun, list[TranscriptEntry]]:
        """Open a run for appending, with its transcript and its last traced turn."""
        run = check_id("run", info.id)
        with self._failing("reopen"):
            async with self._db.pooled() as conn:
                # The revision first: a write landing meanwhile makes the
                # handle stale, never one that misses it.
                cursor = await conn.execute(_REVISION, (run,))
                row = await cursor.fetchone()
                revision = int(row[0]) if row is not None else 0
                cursor = await conn.execute(
                    "SELECT coalesce(max(turn), 0) FROM run_context WHERE run = %s", (run,)
                )
                row = await cursor.fetchone()
                last_turn = int(row[0]) if row is not None else 0
                cursor = await conn.execute(
                    "SELECT record FROM run_transcript WHERE run = %s ORDER BY n", (run,)
                )
                entries = [_entry.decode(text) for (text,) in await cursor.fetchall()]
        return PostgresRun(self, info, last_turn, revision), entries

    async def append(self, run: str, op: str, query: str, params: Mapping[str, object]) -> int:
        """Run *query* (an append to one of *run*'s logs) under the run's row
        lock; the run's revision after it.

        Pipelined: the lock, the insert and the commit go in one round trip.
        """
        with self._failing(op):
            try:
                async with self._db.pooled() as conn:
                    async with conn.pipeline(), conn.transaction():
                        counted = await conn.execute(_LOCK_RUN, (run,))
                        await conn.execute(query, params)
                    row = await counted.fetchone()
            except psycopg.errors.ForeignKeyViolation:
                raise NotFoundError("run", run) from None
        assert row is not None  # the insert's foreign key found the run's row
        return int(row[0])

    async def revision(self, run: str) -> int:
        text = await self._one("read run revision", _REVISION, (check_id("run", run),))
        return int(text) if text is not None else 0

    async def lease(self, run: str, holder: str, now: float, until: float) -> str | None:
        params = {"key": run, "holder": holder, "until": until, "now": now}
        with self._failing("take a lease"):
            async with self._db.pooled() as conn:
                cursor = await conn.execute(_LEASE, params)
                row = await cursor.fetchone()
        # No row: released between the two reads, so free; the next try takes it.
        current = str(row[0]) if row is not None else ""
        return None if current == holder else current

    async def release(self, run: str, holder: str) -> None:
        with self._failing("release a lease"):
            async with self._db.pooled() as conn:
                await conn.execute(_RELEASE, (run, holder))

    async def recover(self, now: float) -> int:
        """After a stop: mark open task and direct runs interrupted; their count.

        Sessions stay ``open``: they resume from their transcript. Only open
        runs are read, through the partial index on them.
        """
        with self._failing("recover"):
            async with self._db.pooled() as conn, conn.transaction():
                cursor = await conn.execute(OPEN_RUNS, (Surface.SESSION.value, now))
                interrupted = 0
                for (text,) in await cursor.fetchall():
                    info = cut_off(_info.decode(text), now)
                    done = await conn.execute(_INTERRUPT, (info.status, encode(info), info.id))
                    interrupted += done.rowcount
        if interrupted:
            log.warning("marked %d runs cut off by a stop as interrupted", interrupted)
        return interrupted

    async def write_info(self, info: RunInfo) -> None:
        await self.write_revision(info)

    async def write_revision(self, info: RunInfo) -> int:
        """Write *info*; the run's revision after it."""
        params = (
            check_id("run", info.id),
            info.created_at,
            info.status,
            info.surface,
            encode(info),
        )
        with self._failing("write run info"):
            async with self._db.pooled() as conn:
                cursor = await conn.execute(_WRITE_INFO, params)
                row = await cursor.fetchone()
        assert row is not None  # INSERT ... RETURNING always returns its row
        return int(row[0])

    async def _one(self, op: str, query: str, params: tuple[str, ...]) -> str | None:
        with self._failing(op):
            async with self._db.pooled() as conn:
                cursor = await conn.execute(query, params)
                row = await cursor.fetchone()
        return None if row is None else str(row[0])

    async def _lines(self, op: str, query: str, run: str) -> list[str]:
        with self._failing(op):
            async with self._db.pooled() as conn:
                cursor = await conn.execute(query, (check_id("run", run),))
                return [str(text) for (text,) in await cursor.fetchall()]

    async def info(self, run: str) -> RunInfo:
        text = await self._one(
            "read run info", "SELECT record FROM runs WHERE id = %s", (check_id("run", run),)
        )
        if text is None:
            raise NotFoundError("run", run)
        return _info.decode(text)

    async def all(self) -> list[RunInfo]:
        # Ids in code point order, as the file backend sorts them, whatever
        # the database's collation.
        with self._failing("list runs"):
            async with self._db.pooled() as conn:
                cursor = await conn.execute(
                    'SELECT record FROM runs ORDER BY created_at, id COLLATE "C"'
                )
                return [_info.decode(text) for (text,) in await cursor.fetchall()]

    async def context(self, run: str) -> list[ContextRecord]:
        lines = await self._lines("read trace", _CONTEXT, run)
        return [_record.decode(line) for line in lines]

    async def export(self, run: str) -> bytes:
        """The run's trace exactly as ``runs/<run>/context.jsonl`` would hold it."""
        lines = await self._lines("read trace", _CONTEXT, run)
        return "".join(f"{line}\n" for line in lines).encode()

    async def transcript(self, run: str) -> list[TranscriptEntry]:
        lines = await self._lines(
            "read transcript", "SELECT record FROM run_transcript WHERE run = %s ORDER BY n", run
        )
        return [_entry.decode(line) for line in lines]

    async def save_session(self, run: str, state: SessionState) -> None:
        with self._failing("save session"):
            async with self._db.pooled() as conn:
                await conn.execute(
                    "INSERT INTO session_states (run, record) VALUES (%s, %s)"
                    " ON CONFLICT (run) DO UPDATE SET record = excluded.record",
                    (check_id("run", run), encode(state)),
                )

    async def load_session(self, run: str) -> SessionState | None:
        text = await self._one(
            "load session",
            "SELECT record FROM session_states WHERE run = %s",
            (check_id("run", run),),
        )
        return None if text is None else _session.decode(text)

    async def session_for(self, worker: str, channel: str) -> str | None:
        return await self._one(
            "read session pointer",
            "SELECT session FROM session_pointers WHERE worker = %s AND channel = %s",
            _pair(worker, channel),
        )

    async def set_session(self, worker: str, channel: str, session: str) -> None:
        with self._failing("set session pointer"):
            async with self._db.pooled() as conn:
                await conn.execute(
                    "INSERT INTO session_pointers (worker, channel, session) VALUES (%s, %s, %s)"
                    " ON CONFLICT (worker, channel) DO UPDATE SET session = excluded.session",
                    (*_pair(worker, channel), session),
                )

    async def clear_session(self, worker: str, channel: str) -> None:
        with self._failing("clear session pointer"):
            async with self._db.pooled() as conn:
                await conn.execute(
                    "DELETE FROM session_pointers WHERE worker = %s AND channel = %s",
                    _pair(worker, channel),
                )


def _pair(worker: str, channel: str) -> tuple[str, str]:
    return check_id("worker", worker), check_id("channel", channel)
