"""The client side loads no part of the daemon: ``roster --help``, the client
commands, ``rosterd.protocol`` and ``rosterd.client``, each in a clean interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# The daemon's own libraries and layers: a client never needs them.
DAEMON_SIDE = (
    "httpx",
    "numpy",
    "Stemmer",
    "httpx_sse",
    "watchfiles",
    "aiofiles",
    "psycopg",
    "psycopg_pool",
    "prometheus_client",
    "opentelemetry",
    "starlette",
    "uvicorn",
    "jinja2",
    "irc",
    "rosterd.bridge",
    "rosterd.daemon",
    "rosterd.inspect",
    "rosterd.engines",
    "rosterd.observe",
    "rosterd.runtime",
    "rosterd.stores",
)

_REPORT = """
import json, sys
from contextlib import redirect_stdout, redirect_stderr
from io import StringIO

with redirect_stdout(StringIO()), redirect_stderr(StringIO()):
    {body}
print(json.dumps({{"loaded": sorted(sys.modules), "code": code}}))
"""


def _loaded(body: str) -> tuple[set[str], object]:
    """The modules a fresh interpreter holds after running *body*, which sets ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", _REPORT.format(body=body)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(done.stdout)
    return set(report["loaded"]), report["code"]


def _daemon_side(modules: set[str]) -> set[str]:
    return {m for m in modules if any(m == d or m.startswith(d + ".") for d in DAEMON_SIDE)}


def test_help_loads_the_parser_alone() -> None:
    modules, code = _loaded('from rosterd.cli import main; code = main(["--help"])')
    assert code == 0
    assert _daemon_side(modules) == set()
    # Not even the protocol: --help and usage errors pay for the parser only.
    assert {"rosterd.protocol", "rosterd.compiler", "rosterd.client"} & modules == set()


def test_a_usage_error_loads_the_parser_alone() -> None:
    modules, code = _loaded('from rosterd.cli import main; code = main(["task", "get"])')
    assert code == 2
    assert _daemon_side(modules) == set()
    assert "rosterd.protocol" not in modules


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["task", "list"],
        ["run", "--worker", "ada", "hello"],
        ["chat", "--worker", "ada", "--channel", "general"],
    ],
    ids=" ".join,
)
def test_a_client_command_loads_no_part_of_the_daemon(argv: list[str], tmp_path: Path) -> None:
    argv = [*argv, "--socket", str(tmp_path / "absent.sock")]
    modules, code = _loaded(f"from rosterd.cli import main; code = main({argv!r})")
    assert code == 1  # no daemon there: the command ran as far as connecting
    assert "rosterd.client" in modules
    assert _daemon_side(modules) == set()


def test_the_protocol_and_the_client_load_no_part_of_the_daemon() -> None:
    modules, _ = _loaded("import rosterd.protocol, rosterd.client; code = None")
    assert _daemon_side(modules) == set()


def test_serve_is_what_loads_the_daemon() -> None:
    """The check above can fail: the same probe sees the daemon where it is loaded."""
    modules, _ = _loaded("import rosterd.daemon; code = None")
    assert {"rosterd.daemon", "httpx", "watchfiles"} <= _daemon_side(modules)


def test_a_daemon_loads_the_telemetry_extras_only_when_its_org_asks() -> None:
    modules, _ = _loaded("import rosterd.daemon; code = None")
    assert {"rosterd.observe"} <= modules
    assert not {m for m in modules if m.startswith(("prometheus_client", "opentelemetry"))}


def test_reading_the_state_loads_no_telemetry_extra(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    argv = ["server", "runs", "list", "--state", str(tmp_path)]
    modules, code = _loaded(f"from rosterd.cli import main; code = main({argv!r})")
    assert code == 0
    assert not {m for m in modules if m.startswith(("prometheus_client", "opentelemetry"))}


@pytest.mark.parametrize("command", ["list", "show"])
def test_reading_runs_loads_neither_engines_nor_sessions_nor_their_libraries(
    command: str, tmp_path: Path
) -> None:
    # A run on disk as the daemon leaves it, read with the daemon down.
    run = tmp_path / "runs" / "d-1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(
        '{"id":"d-1","surface":"direct","worker":"ada","channel":null,"created_at":1.0}'
    )
    argv = [
        "server",
        "runs",
        command,
        *(["d-1"] if command == "show" else []),
        "--state",
        str(tmp_path),
    ]
    modules, code = _loaded(f"from rosterd.cli import main; code = main({argv!r})")
    assert code == 0
    # Showing a run reads its files, through the store's async read path.
    heavy = {"httpx", "watchfiles", "numpy", "Stemmer"} | (
        {"aiofiles"} if command == "list" else set()
    )
    assert heavy & {m.split(".")[0] for m in modules} == set()
    assert not {m for m in modules if m.startswith(("rosterd.runtime", "rosterd.engines"))}
