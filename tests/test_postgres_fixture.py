"""The test PostgreSQL server (tests/postgres.py): real databases, one per test, never root."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import psycopg
import pytest
from postgres import PostgresServer

pytestmark = pytest.mark.anyio


async def _user_tables(url: str) -> list[str]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return [str(name) for (name,) in await cur.fetchall()]


# Run twice under one name: were the database shared or kept, the second CREATE would fail.
@pytest.mark.parametrize("run", [1, 2])
async def test_a_table_written_through_an_async_connection_reads_back(
    postgres_url: str, run: int
) -> None:
    assert postgres_url.startswith("postgresql://")
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        await conn.execute("CREATE TABLE workers (name text PRIMARY KEY, turns int NOT NULL)")
        async with conn.pipeline():
            await conn.execute("INSERT INTO workers VALUES (%s, %s)", ("ada", run))
            await conn.execute("INSERT INTO workers VALUES (%s, %s)", ("bob", 2))
        await conn.commit()
        cur = await conn.execute("SELECT name, turns FROM workers ORDER BY name")
        assert await cur.fetchall() == [("ada", run), ("bob", 2)]
    assert await _user_tables(postgres_url) == ["workers"]


async def test_two_databases_are_distinct_and_start_empty(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    with postgres_server.database() as other:
        assert other != postgres_url
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            await conn.execute("CREATE TABLE only_here (x int)")
        assert await _user_tables(postgres_url) == ["only_here"]
        assert await _user_tables(other) == []


async def test_a_database_is_dropped_even_with_a_connection_left_open(
    postgres_server: PostgresServer,
) -> None:
    async def names() -> list[str]:
        async with await psycopg.AsyncConnection.connect(postgres_server.url("postgres")) as conn:
            cur = await conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'test_%'")
            return [str(name) for (name,) in await cur.fetchall()]

    with postgres_server.database() as url:
        left_open = await psycopg.AsyncConnection.connect(url)
        name = url.split("/")[3].split("?")[0]
        assert name in await names()
    try:
        assert name not in await names()
        with pytest.raises(psycopg.OperationalError):
            await left_open.execute("SELECT 1")
    finally:
        await left_open.close()


async def test_the_server_never_runs_as_root(postgres_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        cur = await conn.execute("SELECT pg_backend_pid()")
        row = await cur.fetchone()
        assert row is not None
        # The backend process serving this connection (alive while it is open), as the
        # kernel sees it.
        uid = (await anyio.Path(f"/proc/{row[0]}").stat()).st_uid
    assert uid != 0
    if os.geteuid() != 0:
        assert uid == os.geteuid()


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # an exited, unreaped process is no server


def test_a_stopped_server_leaves_no_process_and_no_files() -> None:
    with PostgresServer.start() as server:
        assert _running(server.pid)
        assert (server.data / "PG_VERSION").is_file()
    assert not _running(server.pid)
    assert not server.base.exists()
