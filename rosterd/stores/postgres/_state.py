"""One PostgreSQL database as the state of an org, shared by every host."""

from __future__ import annotations

import math
from urllib.parse import urlsplit, urlunsplit

import psycopg
from anyio.abc import AsyncResource
from psycopg_pool import AsyncConnectionPool

from ._channels import PostgresChannels
from ._db import Connection, Database
from ._gates import PostgresGates
from ._memory import PostgresMemory
from ._prefixes import PostgresPrefixes
from ._runs import Inputs, PostgresRuns
from ._schema import migrate
from ._tasks import PostgresTasks


def redact(url: str) -> str:
    """*url* without its password, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresState(AsyncResource):
    """Every store over one connection pool; the schema migrated on open.

    Each write is its own committed transaction (``synchronous_commit`` as
    the server has it, on by default: durable in the WAL on return), so an
    acknowledged write survives kill -9 of either side as a file's fsync does.
    Several hosts may open one database: each read sees what every host
    committed before it began.

    *timeout* bounds how long opening, and any later request, waits for a
    connection before it fails with ``StorageError``. *connection_class*
    makes the pool's connections (a subclass of psycopg's, to watch them).
    """

    channels: PostgresChannels
    memory: PostgresMemory
    gates: PostgresGates
    tasks: PostgresTasks
    runs: PostgresRuns
    prefixes: PostgresPrefixes

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 10,
        timeout: float = 30.0,
        connection_class: type[Connection] = psycopg.AsyncConnection,
    ) -> None:
        self.url = url
        self.where = redact(url)
        self._timeout = timeout
        self._pool: AsyncConnectionPool = AsyncConnectionPool(
            url,
            connection_class=connection_class,
            min_size=1,
            max_size=max_connections,
            open=False,
            timeout=timeout,
            kwargs={"autocommit": True},
        )
        self._db = Database(self._pool, self.where)
        self.channels = PostgresChannels(self._db)
        self.memory = PostgresMemory(self._db)
        self.gates = PostgresGates(self._db)
        self.tasks = PostgresTasks(self._db)
        self.prefixes = PostgresPrefixes(self._db)
        inputs = Inputs(self.channels, self.memory, self.gates, self.prefixes)
        self.runs = PostgresRuns(self._db, inputs)

    def __repr__(self) -> str:
        return f"PostgresState({self.where!r})"

    async def __aenter__(self) -> PostgresState:
        # Migrated over a connection of its own first: a database that cannot
        # be reached fails here with libpq's reason (refused, no such
        # database, authentication), where the pool would only time out.
        with self._db.failing("open"):
            conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=max(2, math.ceil(self._timeout))
            )
            async with conn:
                await migrate(conn, self.where)
        try:
            with self._db.failing("open"):
                await self._pool.open(wait=True, timeout=self._timeout)
            # The gates every briefing reads, indexed before the first turn.
            await self.gates.catch_up()
        except BaseException:
            await self._pool.close()
            raise
        return self

    async def aclose(self) -> None:
        await self._pool.close()
        await self.memory.aclose()
        await self.gates.aclose()
