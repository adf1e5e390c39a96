"""The runs of a database read without the daemon: ``roster server runs`` and ``stats``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from ..._errors import StorageError
from ._db import Database, failing
from ._runs import PostgresRuns
from ._schema import applied_version
from ._state import redact


@asynccontextmanager
async def read_runs(url: str) -> AsyncIterator[PostgresRuns]:
    """The runs of the database at *url* over one connection, closed on exit.

    A reader migrates nothing: it refuses a database that holds no rosterd
    state, or state newer than this rosterd knows.
    """
    where = redact(url)
    # Connected once by hand first: a pool would retry a refused connection
    # until its timeout and then report only that it timed out.
    with failing(where, "connect", url):
        # A host that drops packets must not hang the command for minutes.
        bounded = (
            url
            if "connect_timeout" in conninfo_to_dict(url)
            else make_conninfo(url, connect_timeout=10)
        )
        async with await psycopg.AsyncConnection.connect(bounded, autocommit=True) as conn:
            await _check_schema(conn, where)
    async with AsyncConnectionPool(
        url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
    ) as pool:
        yield PostgresRuns(Database(pool, where))


async def _check_schema(conn: psycopg.AsyncConnection[TupleRow], where: str) -> None:
    try:
        await applied_version(conn, where, "read schema version")
    except psycopg.errors.UndefinedTable:
        raise StorageError(
            f"{where}: holds no rosterd state (no schema); the daemon creates it when it starts",
            path=where,
            op="read schema version",
        ) from None
