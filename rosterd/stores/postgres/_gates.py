"""Gates in the database: questions a worker waits on, filed and resolved
by people, on any host."""

from __future__ import annotations

from collections.abc import Collection

import anyio
import msgspec

from ..._errors import ConflictError, NotFoundError
from ...compiler import GateView
from ...protocol import GateState
from .._gatebook import GateBook, filing_order
from ._db import Database, Numbered, Row, encode, scalar

_gate = msgspec.json.Decoder(GateState)

# Every gate write takes this lock for its transaction before it takes a
# change number. A sequence alone hands numbers out in call order, not
# commit order: a host could see change 7 committed, then change 6, and
# never read 6. Under the lock, change n is visible before n + 1 is taken,
# so reading ``change > last`` misses nothing. Gates change at people's pace.
_CHANGES_LOCK = 0x67617465  # "gate"
_LOCK = "SELECT pg_advisory_xact_lock(%s)"
_FILE = (
    "INSERT INTO gates (n, worker, run, status, filed_at, change, record)"
    " VALUES (%s, %s, %s, 'open', %s, nextval('state_changes'), %s) RETURNING change"
)
_NEXT_GATE = "SELECT nextval('gate_numbers')"
_GET = "SELECT record FROM gates WHERE n = %s"
_GATES = Numbered("gate", "g", _gate, _GET)
# ``status = 'open'`` makes the resolution the one that wins, whatever the
# lock: a gate is resolved once, by one host.
_RESOLVE = (
    "UPDATE gates SET status = 'resolved', change = nextval('state_changes'), record = %s"
    " WHERE n = %s AND status = 'open' RETURNING change"
)
# On index gates_by_change: what changed since the last change seen.
_CHANGED = "SELECT change, record FROM gates WHERE change > %s ORDER BY change"
_ALL = "SELECT record FROM gates"
_OF_WORKER = "SELECT record FROM gates WHERE worker = %s"
# On the partial index gates_open_by_run: what waits, not what was ever filed.
_OPEN_AGAINST_RUNS = "SELECT record FROM gates WHERE status = 'open' AND run IS NOT NULL"
# On index gates_by_run.
_AGAINST = "SELECT record FROM gates WHERE run = ANY(%b::text[])"


class PostgresGates:
    """All gates in table ``gates``; this host keeps the index every briefing
    reads (open gates per worker, open ones per run, resolved ones by time)
    and catches it up on each read from the changes made since, by anyone.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._book = GateBook()
        self._last = 0  # the last change applied
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"PostgresGates({self._db.where!r}, {self._book!r})"

    async def file(
        self, worker: str, summary: str, at: float, channel: str | None, run: str | None
    ) -> GateState:
        async with self._db.transaction("file a gate") as conn:
            await conn.execute(_LOCK, (_CHANGES_LOCK,))
            n = await scalar(conn, _NEXT_GATE)
            gate = GateState(
                id=f"g-{n}", worker=worker, summary=summary, filed_at=at, channel=channel, run=run
            )
            params = (n, worker, run, at, encode(gate))
            change = await scalar(conn, _FILE, params)
        await self._applied(gate, change)
        return gate

    async def resolve(self, gate_id: str, outcome: str, note: str, at: float) -> GateState:
        """Raises ``ConflictError`` if the gate is already resolved, here or
        on another host."""
        n = _GATES.number(gate_id)
        async with self._db.transaction("resolve a gate") as conn:
            await conn.execute(_LOCK, (_CHANGES_LOCK,))
            cursor = await conn.execute(_GET, (n,))
            row = await cursor.fetchone()
            if row is None:
                raise NotFoundError("gate", gate_id)
            gate = self._db.decode(_gate, row[0])
            resolved = msgspec.structs.replace(
                gate, status="resolved", outcome=outcome, note=note, resolved_at=at
            )
            cursor = await conn.execute(_RESOLVE, (encode(resolved), n))
            row = await cursor.fetchone()
            if row is None:
                raise ConflictError(f"gate {gate_id!r} is already resolved ({gate.outcome})")
        await self._applied(resolved, int(row[0]))
        return resolved

    async def get(self, gate_id: str) -> GateState:
        """Raises ``NotFoundError`` for an unknown id."""
        return await _GATES.get(self._db, gate_id)

    async def all(self, worker: str | None = None) -> list[GateState]:
        """Every gate (of *worker*), in filing order."""
        if worker is None:
            rows = await self._db.fetchall("read gates", _ALL)
        else:
            rows = await self._db.fetchall("read gates", _OF_WORKER, (worker,))
        return self._decoded(rows)

    async def open_against_runs(self) -> list[GateState]:
        return self._decoded(await self._db.fetchall("read open gates", _OPEN_AGAINST_RUNS))

    async def against(self, runs: Collection[str]) -> list[GateState]:
        if not runs:
            return []
        rows = await self._db.fetchall("read gates by run", _AGAINST, (list(runs),))
        return self._decoded(rows)

    def _decoded(self, rows: list[Row]) -> list[GateState]:
        return filing_order(self._db.decode(_gate, row[0]) for row in rows)

    async def briefing_for(
        self, worker: str, resolved_since: float | None, *, cached: bool = False
    ) -> GateView:
        """Open gates of *worker*, and those resolved after *resolved_since*;
        the compiler narrows them to the run's channel. *cached*: from the
        index as it is, the last change applied (``last``) checked by the
        turn's first write."""
        if not cached:
            await self.catch_up()
        return self._book.briefing(worker, resolved_since)

    @property
    def last(self) -> int:
        """The last change this host applied."""
        return self._last

    async def waiting_on(self, run: str) -> bool:
        """Whether an open gate was filed against *run*."""
        await self.catch_up()
        return self._book.waiting_on(run)

    async def catch_up(self) -> None:
        """Apply every change committed since the last one applied, by any host:
        one query on ``gates_by_change``, which the first call reads whole."""
        async with self._lock:
            rows = await self._db.fetchall("read gates", _CHANGED, (self._last,))
            for change, record in rows:
                self._book.apply(self._db.decode(_gate, record))
                self._last = int(change)

    async def _applied(self, gate: GateState, change: int) -> None:
        """After a write of ours: apply it now if it is the next change; if
        others came between, the next read catches up, this one included."""
        if change == self._last + 1:
            async with self._lock:
                if change == self._last + 1:
                    self._book.apply(gate)
                    self._last = change

    async def aclose(self) -> None:
        self._book.clear()
        self._last = 0
