"""Shared fixtures: the anyio backend, paths to the example org, daemons,
the provider simulator and each engine kind it speaks, PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from engines_org import PROVIDERS
from harness import (
    Cli,
    DaemonProcess,
    InProcessDaemon,
    copy_org,
    daemon_in_process,
    daemons_started,
    kill_daemons_since,
)
from postgres import PostgresServer
from simulator import Simulator

from rosterd.org import EngineKind
from rosterd.stores import State
from rosterd.stores.files import FileState
from rosterd.stores.postgres import PostgresState

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_ORG = REPO / "examples" / "org"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Long tests first: one started last would keep a worker busy after the others
    # are done (make test hands tests out one by one, longest known first).
    items.sort(
        key=lambda item: not (item.get_closest_marker("long") or item.get_closest_marker("bench"))
    )


@pytest.fixture(autouse=True)
def no_daemon_left() -> Iterator[None]:
    """Whatever ended a test (a failed assertion, a timeout), no daemon
    process it started outlives it; one a module's fixture started before
    it (set up first, as wider fixtures are) is left to that fixture."""
    mark = daemons_started()
    yield
    kill_daemons_since(mark)


@pytest.fixture
def anyio_backend() -> str:
    # aiofiles runs on asyncio's executor, so the daemon and tests use asyncio.
    return "asyncio"


@pytest.fixture
def example_org() -> Path:
    return EXAMPLE_ORG


@pytest.fixture
def org_dir(tmp_path: Path) -> Path:
    """A private copy of examples/org that a test may edit."""
    return copy_org(tmp_path / "org")


@pytest.fixture
def daemon(org_dir: Path, tmp_path: Path) -> Iterator[DaemonProcess]:
    """A running daemon on a copy of the example org (echo engine)."""
    process = DaemonProcess(org_dir, tmp_path / "state").start()
    yield process
    process.stop()


@pytest.fixture
async def served(org_dir: Path, tmp_path: Path) -> AsyncIterator[InProcessDaemon]:
    """The daemon in the test's event loop on a copy of the example org (echo engine)."""
    async with daemon_in_process(org_dir, tmp_path / "state") as daemon:
        yield daemon


@pytest.fixture
def cli(capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``roster`` in process, finding no state or socket from the environment."""
    for name in ("ROSTER_STATE", "ROSTER_SOCKET", "RUNTIME_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    return Cli(capsysbinary)


@pytest.fixture(params=["files", "postgres"])
async def state(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[State]:
    """An opened, empty state of each backend: the store contract holds for both."""
    opened: FileState | PostgresState
    if request.param == "files":
        opened = FileState(tmp_path / "state")
    else:
        opened = PostgresState(request.getfixturevalue("postgres_url"))
    async with opened:
        yield opened


@pytest.fixture
async def simulator() -> AsyncIterator[Simulator]:
    """The provider simulator on a loopback port, with default caching rules."""
    async with Simulator() as simulator:
        yield simulator


@pytest.fixture(params=PROVIDERS)
def kind(request: pytest.FixtureRequest) -> EngineKind:
    """Each engine kind the simulator speaks, in turn (``engines_org.engine_for``
    opens one on it)."""
    value: EngineKind = request.param
    return value


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for this test process (each xdist worker), started on
    first use and stopped when the session ends, whether its tests passed or not."""
    with PostgresServer.start() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A ``postgresql://`` URL of a fresh empty database of the test's own, dropped after it."""
    with postgres_server.database() as url:
        yield url
