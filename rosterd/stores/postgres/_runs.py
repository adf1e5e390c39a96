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
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Literal, LiteralString, NamedTuple

import anyio
import msgspec
import psycopg
import psycopg.errors
from psycopg.rows import TupleRow

from ..._errors import NotFoundError, StaleError, StorageError
from ..._ids import check_id
from ..._paging import newest_page
from ...compiler import ContextRecord
from ...org import Surface
from ...protocol import RunInfo, TranscriptEntry
from .._listing import RunList, UnreadableRun, run_list
from .._open_run import OpenRun
from .._records import Posts, SessionState, cut_off, new_run_id, unreached
from ._channels import POST, PostgresChannels
from ._db import Connection, Database, Row, encode
from ._gates import PostgresGates
from ._memory import PostgresMemory
from ._prefixes import PostgresPrefixes

log = logging.getLogger("rosterd.stores")

_INFO = "SELECT record FROM runs WHERE id = %s"
# The runs created before (created_at, id), newest first.
_OLDER = (
    "SELECT id, created_at, record FROM runs"
    ' WHERE created_at < %s OR (created_at = %s AND id COLLATE "C" < %s)'
    ' ORDER BY created_at DESC, id COLLATE "C" DESC LIMIT %s'
)

_info = msgspec.json.Decoder(RunInfo)
_record = msgspec.json.Decoder(ContextRecord)
_entry = msgspec.json.Decoder(TranscriptEntry)
_session = msgspec.json.Decoder(SessionState)
Cursor = psycopg.AsyncCursor[TupleRow]

# Each write of a run goes on from the revision its handle last saw, and
# counting the next one takes the run's row lock: appends to one run take
# turns, each reading the last line number in a statement that starts once
# the lock is granted. A handle that missed another host's write (one that
# took the lease over while this host stalled past it) finds another
# revision, and ``rosterd_fresh`` fails the whole transaction: no turn is
# numbered twice, and no late reply lands after the other host's turns.
# (NO KEY UPDATE: other transactions' foreign-key checks, KEY SHARE, are
# not blocked. A run that is not there fails the appends' foreign key.)
_LOCK_RUN = (
    "WITH counted AS (UPDATE runs SET revision = revision + 1"
    " WHERE id = %(run)s AND revision = %(revision)s RETURNING revision)"
    " SELECT counted.revision, rosterd_fresh(CASE"
    " WHEN counted.revision IS NULL AND EXISTS (SELECT FROM runs WHERE id = %(run)s)"
    " THEN 'run ' || %(run)s::text END)"
    " FROM (VALUES (1)) AS one LEFT JOIN counted ON true"
)
_APPEND_CONTEXT = (
    "INSERT INTO run_context (run, n, turn, record)"
    " SELECT %(run)s, coalesce(max(n), 0) + 1, %(turn)s, %(record)s"
    " FROM run_context WHERE run = %(run)s"
)
_APPEND_TRANSCRIPT = (
    "INSERT INTO run_transcript (run, n, record)"
    " SELECT %(run)s, last.n + line.i, line.record"
    " FROM (SELECT coalesce(max(n), 0) AS n FROM run_transcript WHERE run = %(run)s) AS last,"
    " unnest(%(records)b::text[]) WITH ORDINALITY AS line (record, i)"
)
_WRITE_INFO = (
    "INSERT INTO runs (id, created_at, status, surface, record) VALUES (%s, %s, %s, %s, %s)"
    " ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at,"
    " status = excluded.status, surface = excluded.surface, record = excluded.record,"
    " revision = runs.revision + 1"
    " RETURNING revision"
)
# Taken when free, expired or already the holder's; either way the holder.
# When the upsert waited for another host's statement on the row (taking
# the lease over) and then left it, a plain read of the row would still
# see it as the statement's snapshot has it: this host's own, expired
# lease. FOR SHARE waits for the row as the upsert did and reads the
# version it found: the host that holds the lease now.
_LEASE = (
    "WITH taken AS ("
    " INSERT INTO leases (key, holder, until) VALUES (%(key)s, %(holder)s, %(until)s)"
    " ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, until = excluded.until"
    " WHERE leases.holder = excluded.holder OR leases.until <= %(now)s"
    " RETURNING holder)"
    " SELECT holder FROM taken"
    " UNION ALL SELECT holder FROM (SELECT holder FROM leases"
    " WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM taken) FOR SHARE) AS current"
)
_RELEASE = "DELETE FROM leases WHERE key = %s AND holder = %s"
_RENEW = "UPDATE leases SET until = %s WHERE key = %s AND holder = %s"
# A warm turn's first write: takes the run's lease and checks that what
# the turn read is what the database holds (the channel's last seq, the
# worker's memory, the gates, the pair's prefix; the session itself is
# ``_LOCK_RUN``'s check). Any of them moved on: ``rosterd_fresh`` fails
# the transaction, nothing of it is kept, and the session reads again.
_FRESH: LiteralString = (
    "WITH taken AS ("
    " INSERT INTO leases (key, holder, until) VALUES (%(run)s, %(holder)s, %(until)s)"
    " ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, until = excluded.until"
    " WHERE leases.holder = excluded.holder OR leases.until <= %(now)s"
    " RETURNING holder)"
    " SELECT rosterd_fresh(CASE"
    " WHEN NOT EXISTS (SELECT FROM taken) THEN 'the lease of run ' || %(run)s::text"
    " WHEN coalesce((SELECT last_seq FROM channels WHERE channel = %(channel)s), 0) <> %(seq)s"
    " THEN 'channel ' || %(channel)s::text"
    " WHEN coalesce((SELECT last_note FROM memory_workers WHERE worker = %(worker)s), 0)"
    " <> %(notes)s"
    " OR coalesce((SELECT last_retired FROM memory_workers WHERE worker = %(worker)s), 0)"
    " <> %(retired)s"
    " THEN 'the memory of ' || %(worker)s::text"
    " WHEN EXISTS (SELECT FROM gates WHERE change > %(change)s) THEN 'a gate'"
    " WHEN (SELECT record FROM prefixes WHERE worker = %(worker)s AND channel = %(channel)s)"
    " IS DISTINCT FROM %(prefix)s::text THEN 'the prefix of ' || %(worker)s::text"
    " END)"
)
# Matches the partial index ``runs_open``: recovery reads the open runs only,
# however many have ever finished.
# A run that a live host holds a lease on is under way, not cut off.
OPEN_RUNS = (
    "SELECT id, record FROM runs WHERE status = 'open' AND surface <> %(session)s"
    " AND NOT EXISTS (SELECT 1 FROM leases WHERE key = runs.id AND until > %(now)s) ORDER BY id"
)
# Open sessions that no pair's pointer leads to, directly or through
# rollovers, nor a live host's lease: on the session itself (a fresh one
# holds it until the pointer names it) or on the one it continues (a
# rollover's turn holds that until it ended naming its successor). A kill
# in between left them, and no open or send can reach or end them. Reads
# the open runs and the pairs' pointers, never the finished runs.
UNREACHED_SESSIONS = (
    "WITH RECURSIVE reached (id) AS (SELECT session FROM session_pointers"
    " UNION SELECT runs.record::jsonb ->> 'rolled_to' FROM runs JOIN reached USING (id)"
    " WHERE runs.status = 'rolled-over')"
    " SELECT id, record FROM runs WHERE status = 'open' AND surface = %(session)s"
    " AND id NOT IN (SELECT id FROM reached WHERE id IS NOT NULL)"
    " AND NOT EXISTS (SELECT 1 FROM leases WHERE until > %(now)s"
    " AND key IN (runs.id, runs.record::jsonb ->> 'rolled_from')) ORDER BY id"
)
_CONTEXT = "SELECT record FROM run_context WHERE run = %s ORDER BY n"
# ``context_until`` reads this many rows at a time.
_CONTEXT_AFTER = "SELECT n, record FROM run_context WHERE run = %s AND n > %s ORDER BY n LIMIT %s"
_HEAD_ROWS = 8
_REVISION = "SELECT revision FROM runs WHERE id = %s"
# Counts a revision: a stalled host's late write to a run ended here finds
# it stale. Only an open run is ended: of hosts recovering at once, one does.
_END_OPEN = (
    "UPDATE runs SET status = %s, record = %s, revision = revision + 1"
    " WHERE id = %s AND status = 'open'"
)


class PostgresRun(OpenRun):
    """An open run: appends commit before they return, numbered by the database.

    Each write is one pipeline, one transaction and one round trip: the
    entries ``record_later`` kept go first, and while ``hold`` has the lease
    still to take, the write takes it and checks what the turn read
    (``Fresh``). The handle's writes and lease renewals take turns.
    """

    def __init__(
        self, store: PostgresRuns, info: RunInfo, last_turn: int = 0, revision: int = 0
    ) -> None:
        super().__init__(info, last_turn)
        self.store = store
        # The run's revision after this handle's last write (or its reading).
        self._revision = revision
        self._later: list[TranscriptEntry] = []
        self._lease: _Lease | None = None
        self._lock = anyio.Lock()

    async def trace(self, record: ContextRecord) -> None:
        await self._write("trace", _Writes(record=record))

    async def record(self, entry: TranscriptEntry) -> None:
        await self.record_many((entry,))

    async def record_many(self, entries: Sequence[TranscriptEntry]) -> None:
        """Append *entries* in one transaction: all of them or none."""
        await self._write("record", _Writes(entries=tuple(entries)))

    async def append(self, record: ContextRecord, entries: Sequence[TranscriptEntry]) -> None:
        await self._write("append", _Writes(record=record, entries=tuple(entries)))

    async def record_later(self, entry: TranscriptEntry) -> None:
        self._later.append(entry)

    async def conclude(self, posts: Posts) -> None:
        await self._write("conclude a turn", _Writes(posts=posts, release=True))

    async def end(self, info: RunInfo) -> None:
        """Write the run's final *info*."""
        await self._write("write run info", _Writes(info=info))
        self.info = info

    async def hold(self, holder: str, now: float, until: float) -> None:
        self._lease = _Lease(holder, now, until)

    async def renew(self, holder: str, until: float) -> bool:
        async with self._lock:
            lease = self._lease
            if lease is None or lease.state != "held":
                return True  # not taken yet, or given up: nothing to lose
            lease.until = until
            return await self.store.renew(self.info.id, holder, until)

    async def let_go(self, holder: str) -> None:
        async with self._lock:
            lease, self._lease = self._lease, None
            if lease is not None and lease.state == "held":
                await self.store.release(self.info.id, holder)

    async def aclose(self) -> None:
        # Nothing is held between appends: each takes a pooled connection.
        return None

    async def stale(self) -> bool:
        return await self.store.revision(self.info.id) != self._revision

    async def _write(self, op: str, writes: _Writes) -> None:
        async with self._lock:
            lease = self._lease
            taking = lease is not None and lease.state == "pending"
            later = tuple(self._later)
            writes = msgspec.structs.replace(writes, entries=later + writes.entries)
            check = None
            if taking:
                assert lease is not None
                check = self.store.fresh(self.info, lease)
            release = lease if writes.release and lease is not None else None
            revision, rows = await self.store.write(
                op, self.info, writes, self._revision, check, release
            )
            del self._later[: len(later)]
            if writes.record is not None:
                self.last_turn = max(self.last_turn, writes.record.turn)
            if revision is not None:
                self._revision = revision
            if release is not None:
                release.state = "released"
            elif taking:
                assert lease is not None
                lease.state = "held"
            if writes.posts is not None:
                self.store.posted(writes.posts, rows)


class _Writes(msgspec.Struct, frozen=True):
    """What one write of a run makes durable, in one transaction."""

    record: ContextRecord | None = None
    entries: tuple[TranscriptEntry, ...] = ()
    info: RunInfo | None = None
    posts: Posts | None = None
    release: bool = False


class _Lease:
    """A lease ``hold`` asked for: pending until a write takes it, then held
    until given up."""

    def __init__(self, holder: str, now: float, until: float) -> None:
        self.holder = holder
        self.now = now
        self.until = until
        self.state: Literal["pending", "held", "released"] = "pending"

    def __repr__(self) -> str:
        return f"_Lease({self.holder!r}, {self.state})"


class Inputs(NamedTuple):
    """The stores whose reads a warm turn's first write checks."""

    channels: PostgresChannels
    memory: PostgresMemory
    gates: PostgresGates
    prefixes: PostgresPrefixes


class PostgresRuns:
    """Runs and session pointers over a pool of autocommit connections.

    *where* names the database in errors (the URL without its password).
    *inputs* are the daemon's other stores (a reader has none).
    """

    def __init__(self, db: Database, inputs: Inputs | None = None) -> None:
        self._db = db
        self.where = db.where
        self._inputs = inputs

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

    async def write(
        self,
        op: str,
        info: RunInfo,
        writes: _Writes,
        since: int,
        check: Mapping[str, object] | None,
        release: _Lease | None,
    ) -> tuple[int | None, list[Row]]:
        """Make *writes* to run *info* durable, after *check* (``_FRESH``'s
        parameters) and before giving up *release*: the run's revision after
        them (``None`` when they leave it), and the rows ``POST`` returned.
        ``StaleError`` when the run's revision is no longer *since*.

        One pipeline, so one round trip: its statements up to the sync are
        one (implicit) transaction, all kept or none.
        """
        run = check_id("run", info.id)
        with self._failing(op):
            try:
                async with self._db.pooled() as conn:
                    try:
                        async with conn.pipeline():
                            if check is not None:
                                await conn.execute(_FRESH, check)
                            counted, posted = await self._queue(conn, run, writes, since)
                            if release is not None:
                                await conn.execute(_RELEASE, (run, release.holder))
                    except psycopg.Error:
                        # After an aborted pipeline psycopg may take a statement
                        # for prepared that the server skipped: the pool drops
                        # the connection rather than fail the next one.
                        await conn.close()
                        raise
                    row = await counted.fetchone() if counted is not None else None
                    rows = await posted.fetchall() if posted is not None else []
            except psycopg.errors.ForeignKeyViolation:
                raise NotFoundError("run", run) from None
            except psycopg.errors.SerializationFailure as exc:
                raise StaleError(exc.diag.message_primary or str(exc)) from None
        return (int(row[0]) if row is not None else None), rows

    async def _queue(
        self, conn: Connection, run: str, writes: _Writes, since: int
    ) -> tuple[Cursor | None, Cursor | None]:
        """Send *writes*' statements down *conn*'s pipeline: the cursors of
        the run's revision and of the posts' seqs."""
        counted = posted = None
        if writes.record is not None or writes.entries or writes.info is not None:
            counted = await conn.execute(_LOCK_RUN, {"run": run, "revision": since})
        if writes.record is not None:
            record = writes.record
            params = {"run": run, "turn": record.turn, "record": encode(record)}
            await conn.execute(_APPEND_CONTEXT, params)
        if writes.entries:
            records = [encode(entry) for entry in writes.entries]
            await conn.execute(_APPEND_TRANSCRIPT, {"run": run, "records": records})
        if writes.info is not None:
            counted = await conn.execute(_WRITE_INFO, _info_params(writes.info))
        if writes.posts is not None:
            posts = writes.posts
            channels = self._stores().channels
            post = channels.post_params(posts.channel, posts.messages, posts.run)
            posted = await conn.execute(POST, post)
        return counted, posted

    def fresh(self, info: RunInfo, lease: _Lease) -> Mapping[str, object]:
        """``_FRESH``'s parameters: what this host holds of *info*'s inputs."""
        inputs = self._stores()
        worker, channel = info.worker, info.channel or ""
        seq = inputs.channels.last_known(channel) if info.channel is not None else 0
        notes, retired = inputs.memory.known(worker) or (-1, -1)
        return {
            "run": info.id,
            "holder": lease.holder,
            "until": lease.until,
            "now": lease.now,
            "channel": channel,
            "seq": -1 if seq is None else seq,
            "worker": worker,
            "notes": notes,
            "retired": retired,
            "change": inputs.gates.last,
            "prefix": inputs.prefixes.row(worker, info.channel),
        }

    def posted(self, posts: Posts, rows: Sequence[Row]) -> None:
        """Keep what a run's write posted in its channel's tail."""
        self._stores().channels.posted(posts.channel, posts.messages, posts.run, rows)

    def _stores(self) -> Inputs:
        assert self._inputs is not None, "a reader's runs write nothing"
        return self._inputs

    async def renew(self, run: str, holder: str, until: float) -> bool:
        """Extend *holder*'s lease on *run*; ``False`` if it has none."""
        with self._failing("renew a lease"):
            async with self._db.pooled() as conn:
                cursor = await conn.execute(_RENEW, (until, run, holder))
                return cursor.rowcount == 1

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
        """Mark open task and direct runs interrupted, and end ``failed``
        open sessions nothing leads to, where no live host holds a lease
        (``OPEN_RUNS``, ``UNREACHED_SESSIONS``); their count.

        Sessions a pair leads to stay ``open``: they resume from their
        transcript. Only open runs are read, through the partial index on them.
        """
        with self._failing("recover"):
            async with self._db.pooled() as conn, conn.transaction():
                interrupted = await self._end_open(conn, OPEN_RUNS, cut_off, now)
                abandoned = await self._end_open(conn, UNREACHED_SESSIONS, unreached, now)
        if interrupted:
            log.warning("marked %d runs cut off by a stop as interrupted", interrupted)
        if abandoned:
            log.warning("ended %d sessions no pair leads to as failed", abandoned)
        return interrupted + abandoned

    async def _end_open(
        self,
        conn: Connection,
        query: LiteralString,
        end: Callable[[RunInfo, float], RunInfo],
        now: float,
    ) -> int:
        """End each open run *query* finds as *end* has it as of *now*: how
        many were still open (another host recovering at once ends the
        others). One whose record cannot be read is left as it is: it must
        not stop every host's recovery, round after round."""
        cursor = await conn.execute(query, {"session": Surface.SESSION.value, "now": now})
        ended = 0
        for run, text in await cursor.fetchall():
            try:
                info = end(self._db.decode(_info, text), now)
            except StorageError as failure:
                log.error("run %s cannot be read; recovery leaves it as it is: %s", run, failure)
                continue
            done = await conn.execute(_END_OPEN, (info.status, encode(info), info.id))
            ended += done.rowcount
        return ended

    async def write_info(self, info: RunInfo) -> None:
        await self.write_revision(info)

    async def write_revision(self, info: RunInfo) -> int:
        """Write *info*; the run's revision after it."""
        with self._failing("write run info"):
            async with self._db.pooled() as conn:
                cursor = await conn.execute(_WRITE_INFO, _info_params(info))
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
        text = await self._one("read run info", _INFO, (check_id("run", run),))
        if text is None:
            raise NotFoundError("run", run)
        return self._db.decode(_info, text)

    async def all(self) -> RunList:
        with self._failing("list runs"):
            async with self._db.pooled() as conn:
                cursor = await conn.execute("SELECT id, record FROM runs")
                rows = await cursor.fetchall()
        infos: list[RunInfo] = []
        unreadable: list[UnreadableRun] = []
        self._read_infos(rows, infos, unreadable)
        # Sorted here, ids in code point order as the file backend sorts
        # them, whatever the database's collation.
        return run_list(infos, unreadable)

    async def newest(self, limit: int | None, before: str | None = None) -> list[RunInfo]:
        if limit is None:
            return newest_page((await self.all()).runs, "run", limit, before)
        # A page's worth of rows at a time, newest first, from just before
        # *before* (or the newest run): ids in code point order, as ``all``
        # sorts them, whatever the database's collation.
        at, after = float("inf"), ""
        if before is not None:
            text = await self._one("read run info", _INFO, (check_id("run", before),))
            # One that cannot be read is not among the runs ``all`` lists.
            start: list[RunInfo] = []
            self._read_infos([] if text is None else [(before, text)], start, [])
            if not start:
                raise NotFoundError("run", before)
            at, after = start[0].created_at, before
        found: list[RunInfo] = []
        unreadable: list[UnreadableRun] = []
        while len(found) < limit:
            wanted = limit - len(found)
            rows = await self._db.fetchall("list runs", _OLDER, (at, at, after, wanted))
            self._read_infos(((run, text) for run, _, text in rows), found, unreadable)
            if len(rows) < wanted:
                break
            at, after = rows[-1][1], rows[-1][0]
        return run_list(found, unreadable).runs

    def _read_infos(
        self,
        rows: Iterable[tuple[str, str]],
        infos: list[RunInfo],
        unreadable: list[UnreadableRun],
    ) -> None:
        """The info of each (id, record) row into *infos*; each that does
        not decode (only a hand edit can make one) into *unreadable*."""
        for run, text in rows:
            try:
                infos.append(self._db.decode(_info, text))
            except StorageError as failure:
                unreadable.append(UnreadableRun(run, failure.message))

    async def context(self, run: str) -> list[ContextRecord]:
        lines = await self._lines("read trace", _CONTEXT, run)
        return [_record.decode(line) for line in lines]

    async def context_until(
        self, run: str, enough: Callable[[ContextRecord], bool]
    ) -> list[ContextRecord]:
        run = check_id("run", run)
        records: list[ContextRecord] = []
        after = -1
        with self._failing("read trace"):
            async with self._db.pooled() as conn:
                # A few rows at a time: what is wanted is usually the first.
                while True:
                    cursor = await conn.execute(_CONTEXT_AFTER, (run, after, _HEAD_ROWS))
                    rows = await cursor.fetchall()
                    for _, text in rows:
                        records.append(_record.decode(str(text)))
                        if enough(records[-1]):
                            return records
                    if len(rows) < _HEAD_ROWS:
                        return records
                    after = rows[-1][0]

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


def _info_params(info: RunInfo) -> tuple[str, float, str, str, str]:
    return check_id("run", info.id), info.created_at, info.status, info.surface, encode(info)


def _pair(worker: str, channel: str) -> tuple[str, str]:
    return check_id("worker", worker), check_id("channel", channel)
