"""One PostgreSQL database as the state of an org, shared by every host."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from anyio.abc import AsyncResource
from psycopg_pool import AsyncConnectionPool

from ._schema import migrate

__all__ = ("PostgresState", "redact")


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
    """

    def __init__(self, url: str, *, max_connections: int = 10) -> None:
        self.url = url
        self.where = redact(url)
        self._pool: AsyncConnectionPool = AsyncConnectionPool(
            url, min_size=1, max_size=max_connections, open=False, kwargs={"autocommit": True}
        )

    def __repr__(self) -> str:
        return f"PostgresState({self.where!r})"

    async def __aenter__(self) -> PostgresState:
        await self._pool.open(wait=True)
        async with self._pool.connection() as conn:
            await migrate(conn, self.where)
        return self

    async def aclose(self) -> None:
        await self._pool.close()
