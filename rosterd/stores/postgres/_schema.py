"""The schema, as numbered SQL files applied in order, each exactly once.

``migrations/NNNN_name.sql`` files ship with the package. ``migrate`` takes
an advisory lock first, so hosts starting together apply each file once;
``rosterd_schema`` records what is applied.
"""

from __future__ import annotations

import logging
import re
from importlib import resources

import psycopg
from psycopg.rows import TupleRow

from ..._errors import StorageError

log = logging.getLogger("rosterd.stores")

_LOCK_KEY = 0x726F7374  # "rost": one advisory lock for schema changes
_NAME = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")


def _migrations() -> list[tuple[int, str, str]]:
    found = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = _NAME.fullmatch(entry.name)
        if match is not None:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


SCHEMA_VERSION = max(number for number, _, _ in _migrations())


async def applied_version(conn: psycopg.AsyncConnection[TupleRow], where: str, op: str) -> int:
    """The schema version the database is at; refused if newer than this rosterd's."""
    cursor = await conn.execute("SELECT coalesce(max(version), 0) FROM rosterd_schema")
    row = await cursor.fetchone()
    version = int(row[0]) if row is not None else 0
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"{where}: the rosterd schema is version {version}; this rosterd knows up to "
            f"{SCHEMA_VERSION}: upgrade rosterd",
            path=where,
            op=op,
        )
    return version


async def migrate(conn: psycopg.AsyncConnection[TupleRow], where: str) -> int:
    """Bring the database to ``SCHEMA_VERSION``; the number of files applied.

    Refuses a database whose schema is newer than this rosterd knows.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS rosterd_schema ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await applied_version(conn, where, "migrate")
        applied = 0
        for number, name, sql in _migrations():
            if number <= current:
                continue
            await conn.execute(sql.encode())
            await conn.execute(
                "INSERT INTO rosterd_schema (version, name) VALUES (%s, %s)", (number, name)
            )
            log.info("applied schema migration %s", name)
            applied += 1
        return applied
