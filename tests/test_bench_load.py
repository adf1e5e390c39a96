"""The load benchmark runs against a real daemon and reports its figures."""

from __future__ import annotations

import re
import sys

import psycopg
import pytest
from harness import REPO, run_bench
from postgres import PostgresServer

sys.path.insert(0, str(REPO / "bench"))
from _daemon import server_processes  # bench/ is scripts, not a package

pytestmark = pytest.mark.bench


def test_bench_load_quick_reports_its_figures_and_a_database_beside_the_files(
    postgres_url: str,
) -> None:
    # One run with --state prints every figure of a plain run, then the backends:
    # the quick run takes seconds, so it runs once for all of them.
    out = run_bench("load.py", "--quick", "--state", postgres_url)
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+\.\d)\s+(\d+\.\d+)\s+(\d+\.\d+)$", out, re.M)
    assert [int(sessions) for sessions, *_ in rows] == [1, 10, 200], out
    assert all(float(rate) > 0 for _, _, rate, _, _ in rows)
    assert "closed loop" in out, out
    assert re.search(r"^ratio turns/s 200 sessions / 1 session: \d+\.\d\d", out, re.M), out
    # The floor beside the daemon: each part's p50, their sum, the turn's p50, the ratio.
    parts = re.findall(r"^\s*(compile|encode|append\+fsync|socket|floor|daemon turn)\s+"
                       r"(\d+\.\d) us", out, re.M)  # fmt: skip
    assert [part for part, _ in parts] == [
        "compile",
        "encode",
        "append+fsync",
        "socket",
        "floor",
        "daemon turn",
    ], out
    assert all(float(us) > 0 for _, us in parts), out
    assert re.search(r"^ratio turn p50 / floor: \d+\.\d\d", out, re.M), out
    # Beside it, the contract's disk waits as the file store makes them, and the
    # ratio to the floor that waits them instead of its one fsync.
    waits = re.search(r"^\s+disk waits\s+(\d+\.\d) us  the contract's two waits", out, re.M)
    assert waits is not None and float(waits.group(1)) > 0, out
    assert re.search(
        r"^ratio turn p50 / floor with those waits for its fsync: \d+\.\d\d "
        r"\(the waits alone are \d+\.\d\d floors\)$",
        out,
        re.M,
    ), out
    # The profile: per-turn time and share of each bucket, then their total.
    buckets = re.findall(
        r"^\s*(compile|encode|store|socket|engine glue|other|total)\s+(\d+\.\d)\s+"
        r"(\d+\.\d)%$",
        out,
        re.M,
    )
    assert [bucket for bucket, _, _ in buckets] == [
        "compile",
        "encode",
        "store",
        "socket",
        "engine glue",
        "other",
        "total",
    ], out
    assert float(buckets[-1][1]) > 0 and buckets[-1][2] == "100.0", out
    assert re.search(r"store includes fsync, \d+\.\d us a turn", out), out
    assert re.search(r"resident memory: \d+\.\d KiB per warm session \(200 warm\)", out), out
    assert re.search(r"late/early ratio \d+\.\d\d", out), out
    # Accumulated state: notes, gates, turn p50, ratio to empty, status p50 and max.
    grown = re.findall(
        r"^\s+(\d+)\s+(\d+)\s+\d+\.\d\d\s+(\d+\.\d\d)\s+\d+\.\d\d\s+\d+\.\d\d$", out, re.M
    )
    assert [(int(notes), int(gates)) for notes, gates, _ in grown] == [
        (0, 0),
        (10_000, 2_500),
        (100_000, 25_000),
    ], out
    assert float(grown[0][2]) == 1.0
    # The first turn after a restart: warmed up beside on first use.
    restart = re.search(
        r"^  session going on, notes warmed up: (\d+\.\d) ms\n"
        r"  new session, notes read on first use: (\d+\.\d) ms\n"
        r"ratio first turn warmed / first use: \d+\.\d{3}$",
        out,
        re.M,
    )
    assert restart is not None and all(float(ms) > 0 for ms in restart.groups()), out
    assert re.search(
        r"^daemon\.status while the notes were indexed: p50 \d+\.\d\d ms, max \d+\.\d\d ms",
        out,
        re.M,
    ), out
    # Telemetry on beside off, with the ratio of their turn p50s.
    assert re.search(r"^\s+off\s+\d+\.\d\d$", out, re.M), out
    assert re.search(r"^\s+on\s+\d+\.\d\d$", out, re.M), out
    assert re.search(r"ratio turn p50 telemetry on / off: \d+\.\d\d", out), out
    # Racing posts to one channel beside one poster's.
    assert re.search(r"^ratio posts/s 32 posters / 1 poster: \d+\.\d\d", out, re.M), out
    # Each row ends with the cores the daemons, the server and the clients kept busy.
    backends = re.findall(
        r"^\s+(files|postgresql)\s+(\d)\s+(\d+\.\d)\s+\d+\.\d\d\s+\d+\.\d\d"
        r"\s+(\d+\.\d\d)\s+(\d+\.\d\d|—)\s+(\d+\.\d\d)$",
        out,
        re.M,
    )
    assert [(name, int(daemons)) for name, daemons, *_ in backends] == [
        ("files", 1),
        ("postgresql", 1),
        ("postgresql", 2),
    ], out
    assert all(float(rate) > 0 for _, _, rate, *_ in backends)
    # The daemons worked in every row. The server is read only in its own rows, and
    # only the test's server: the other workers' servers on this machine never count.
    assert all(float(daemons) > 0 for *_, daemons, _, _ in backends), out
    servers = [server for *_, server, _ in backends]
    assert servers[0] == "—" and all(float(server) > 0 for server in servers[1:]), out
    # Their ratios, printed, never asserted: times depend on the machine.
    assert re.search(r"^ratio turns/s postgresql 1 daemon / files: \d+\.\d\d", out, re.M), out
    assert re.search(r"^ratio turns/s postgresql 2 daemons / 1: \d+\.\d\d", out, re.M), out


def _backend(connection: psycopg.Connection[tuple[int]]) -> int:
    row = connection.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return row[0]


def test_the_server_processes_read_are_those_of_the_benchs_server_and_no_other(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    # Other servers run beside it (each test worker has its own): their CPU is no
    # part of the bench's server.
    listed = server_processes(postgres_url)
    with (
        PostgresServer.start() as other,
        other.database() as other_url,
        psycopg.connect(postgres_url) as ours,
        psycopg.connect(other_url) as theirs,
    ):
        processes = listed()
        assert postgres_server.pid in processes and _backend(ours) in processes
        assert other.pid not in processes and _backend(theirs) not in processes
