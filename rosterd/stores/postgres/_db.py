"""What the PostgreSQL stores share: the pool, errors as ``StorageError``,
records as the exact text the file backend writes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any, Generic, LiteralString, TypeVar

import msgspec
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..._errors import NotFoundError, StorageError

Row = tuple[Any, ...]
Params = Sequence[Any] | Mapping[str, Any]
Connection = psycopg.AsyncConnection[TupleRow]

_encoder = msgspec.json.Encoder()
T = TypeVar("T")


def encode(record: object) -> str:
    """*record* as the line the file backend writes for it, without the newline."""
    return _encoder.encode(record).decode()


@contextmanager
def failing(where: str, op: str, conninfo: object) -> Iterator[None]:
    """Database errors (a pool timeout among them) leave as ``StorageError``
    naming *where*, the password cut out."""
    try:
        yield
    except (psycopg.Error, PoolTimeout) as exc:
        # One line: libpq's own messages run over several, tab-indented.
        message = " ".join(str(exc).split()) or type(exc).__name__
        # libpq names host, port and user in its messages, never the
        # password; cut it out anyway should one ever quote the conninfo.
        password = _password(conninfo)
        if password:
            message = message.replace(password, "***")
        raise StorageError(f"{where}: {op} failed: {message}", path=where, op=op) from None


def _password(conninfo: object) -> str | None:
    if not isinstance(conninfo, str):
        return None  # a callable the pool calls for each connection
    try:
        password = conninfo_to_dict(conninfo).get("password")
    except psycopg.Error:
        return None  # not parseable, so libpq cannot have quoted a password from it
    return str(password) if password else None


class Database:
    """A pool of autocommit connections, and *where*: the URL without its
    password, which every error names."""

    def __init__(self, pool: AsyncConnectionPool, where: str) -> None:
        self.pool = pool
        self.where = where

    def __repr__(self) -> str:
        return f"Database({self.where!r})"

    def failing(self, op: str) -> AbstractContextManager[None]:
        """Database errors (a pool timeout among them) leave as ``StorageError``."""
        return failing(self.where, op, self.pool.conninfo)

    def decode(self, decoder: msgspec.json.Decoder[T], record: str) -> T:
        """A row's record; one that does not decode (only a hand edit can
        make one) is a ``StorageError``."""
        try:
            return decoder.decode(record)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            name = getattr(decoder.type, "__name__", "")
            raise StorageError(
                f"{self.where}: unreadable {name} record: {exc}", path=self.where, op="decode"
            ) from None

    @asynccontextmanager
    async def pooled(self) -> AsyncIterator[Connection]:
        """A connection from the pool; after a lost connection every idle one
        is checked, so requests once the server is back connect afresh
        instead of each finding a connection the outage left dead."""
        try:
            async with self.pool.connection() as conn:
                yield conn
        except psycopg.OperationalError:
            await self.pool.check()
            raise

    @asynccontextmanager
    async def connection(self, op: str) -> AsyncIterator[Connection]:
        """A pooled connection for a few statements, each committed on its own."""
        with self.failing(op):
            async with self.pooled() as conn:
                yield conn

    @asynccontextmanager
    async def transaction(self, op: str) -> AsyncIterator[Connection]:
        """A connection in a transaction, committed when the block ends, rolled
        back if it raises."""
        with self.failing(op):
            async with self.pooled() as conn, conn.transaction():
                yield conn

    async def fetchone(self, op: str, query: LiteralString, params: Params = ()) -> Row | None:
        async with self.connection(op) as conn:
            cursor = await conn.execute(query, params)
            return await cursor.fetchone()

    async def fetchall(self, op: str, query: LiteralString, params: Params = ()) -> list[Row]:
        async with self.connection(op) as conn:
            cursor = await conn.execute(query, params)
            return await cursor.fetchall()


async def scalar(conn: Connection, query: LiteralString, params: Params = ()) -> int:
    """The integer a statement returns in its one row (``nextval``, ``RETURNING``)."""
    cursor = await conn.execute(query, params)
    row = await cursor.fetchone()
    assert row is not None, query  # such statements always return their row
    return int(row[0])


class Numbered(Generic[T]):
    """A kind of record whose ids are ``<prefix>-<n>`` (a gate ``g-<n>``, a
    task ``task-<n>``), one row each, keyed by its number."""

    def __init__(
        self, kind: str, prefix: str, decoder: msgspec.json.Decoder[T], by_number: LiteralString
    ) -> None:
        self.kind = kind
        self.prefix = prefix
        self.decoder = decoder
        self._by_number = by_number

    def number(self, key: str) -> int:
        """The *n* of *key*; a key that is not ``<prefix>-<n>`` names no record."""
        head, _, tail = key.rpartition("-")
        # Past bigint, no row can have it: unknown, not a database error.
        if head != self.prefix or not tail.isascii() or not tail.isdigit() or int(tail) >= 2**63:
            raise NotFoundError(self.kind, key)
        return int(tail)

    async def get(self, db: Database, key: str) -> T:
        """The record *key* names; ``NotFoundError`` when there is none."""
        row = await db.fetchone(f"read a {self.kind}", self._by_number, (self.number(key),))
        if row is None:
            raise NotFoundError(self.kind, key)
        return db.decode(self.decoder, row[0])
