"""Prometheus metrics: a real Prometheus scrapes a real daemon, and promtool
checks the exposition."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from harness import REPO, DaemonProcess, daemon_in_process
from prometheus import free_port, prometheus_server, promtool

from rosterd import ConfigError
from rosterd.org import load_org

pytestmark = pytest.mark.anyio

DASHBOARD = REPO / "docs" / "grafana-dashboard.json"


def with_metrics(org: Path, listen: str, extra: str = "") -> None:
    with (org / "org.toml").open("a") as toml:
        toml.write(f'\n[metrics]\nlisten = "{listen}"\n{extra}')


async def test_prometheus_counts_every_turn_and_promtool_finds_no_problem(
    org_dir: Path, tmp_path: Path
) -> None:
    listen = f"127.0.0.1:{free_port()}"
    with_metrics(org_dir, listen)
    with prometheus_server(tmp_path / "prometheus", listen) as prometheus:
        async with (
            daemon_in_process(org_dir, tmp_path / "state") as daemon,
            await daemon.client() as client,
        ):
            opened = await client.session_open("ada", "general")
            for n in range(5):
                await client.session_send(opened.session, f"question {n}")
            await client.run_direct("grace", "what is blocked?")
            await client.run_direct("grace", "and now?")
            await prometheus.until("sum(rosterd_turns_total)", 7)
            by_surface = await prometheus.query(
                'sum(rosterd_turns_total{surface="session",worker="ada",outcome="ok"})'
            )
            warm = await prometheus.query("rosterd_sessions_warm")
            # Every query of the shipped dashboard is one Prometheus takes.
            for panel in json.loads(DASHBOARD.read_text())["panels"]:
                for target in panel["targets"]:
                    await prometheus.check(target["expr"])
            async with httpx.AsyncClient() as http:
                exposition = (await http.get(f"http://{listen}/metrics")).content

    assert (by_surface, warm) == (5, 1)
    checked = promtool("check", "metrics", stdin=exposition)
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, b"", b"")
    text = exposition.decode()
    for name in (
        "rosterd_turn_duration_seconds_bucket",
        "rosterd_engine_first_token_seconds_bucket",
        'rosterd_tokens_total{engine="echo",kind="output",worker="ada"}',
        'rosterd_cost_usd_total{engine="echo",model="echo",worker="ada"} 0.0',
        "rosterd_queue_wait_seconds_count 5.0",
        "rosterd_connections 1.0",
        'rosterd_tasks{status="queued"}',
        "process_resident_memory_bytes",
    ):
        assert name in text, name
    # Labels are bounded: no session or run id, no message text.
    assert opened.session not in text and "question" not in text


@pytest.mark.long
async def test_a_thousand_scrapes_at_once_are_all_answered(org_dir: Path, tmp_path: Path) -> None:
    # Connections the listen backlog has no room for are dropped by the
    # kernel; a scraper whose handshake was dropped waits out its retries.
    listen = f"127.0.0.1:{free_port()}"
    with_metrics(org_dir, listen)
    answered: list[int] = []

    async def scrape(http: httpx.AsyncClient) -> None:
        answered.append((await http.get(f"http://{listen}/metrics")).status_code)

    with DaemonProcess(org_dir, tmp_path / "state").start():
        limits = httpx.Limits(max_connections=None)
        async with (
            httpx.AsyncClient(limits=limits, timeout=None) as http,
            anyio.create_task_group() as tg,
        ):
            for _ in range(1000):
                tg.start_soon(scrape, http)
    assert answered == [200] * 1000


@pytest.mark.parametrize("head", [b"", b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
def test_a_scrape_connection_that_sends_no_whole_request_is_closed(
    org_dir: Path, tmp_path: Path, head: bytes
) -> None:
    # Each connection has a thread of its own: held open with nothing, or
    # part of a request, a thousand of them would hold a thousand threads.
    listen = f"127.0.0.1:{free_port()}"
    with_metrics(org_dir, listen)
    host, port = listen.split(":")
    with DaemonProcess(org_dir, tmp_path / "state").start() as daemon:
        with socket.create_connection((host, int(port))) as idle:
            idle.settimeout(60)
            idle.sendall(head)
            assert idle.recv(1) == b""
        # Closed quietly: no traceback in the daemon's log, and scrapes go on.
        assert httpx.get(f"http://{listen}/metrics").status_code == 200
    assert "Traceback" not in daemon.log_path.read_text()


def test_a_metrics_address_in_use_fails_the_start_naming_it(org_dir: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        with_metrics(org_dir, listen)
        done = serve(org_dir, tmp_path / "state")
    assert done.returncode == 1
    assert f"[metrics] listen = '{listen}': cannot listen: Address already in use" in done.stderr
    assert not (tmp_path / "state" / "rosterd.sock").exists()


@pytest.mark.parametrize(
    ("listen", "extra", "says"),
    [
        ("0.0.0.0:9464", "", "not a loopback address: set allow_remote = true"),
        ("192.0.2.1:9464", "", "allow_remote"),
        ("9464", "", "must be HOST:PORT"),
        ("127.0.0.1:99999", "", "must be HOST:PORT"),
        ("127.0.0.1:9464", "allow_remotely = true\n", "unknown key"),
    ],
)
def test_bad_metrics_settings_are_refused_at_load(
    org_dir: Path, listen: str, extra: str, says: str
) -> None:
    with_metrics(org_dir, listen, extra)
    with pytest.raises(ConfigError, match="metrics") as refused:
        load_org(org_dir)
    assert says in str(refused.value)


def test_a_remote_address_is_taken_with_allow_remote(org_dir: Path) -> None:
    with_metrics(org_dir, "0.0.0.0:9464", "allow_remote = true\n")
    assert load_org(org_dir).metrics.listen == "0.0.0.0:9464"


# Runs the daemon, with an extra's import blocked as if it were not installed.
_SERVE = """
import sys
for module in sys.argv[1].split():
    sys.modules[module] = None
from rosterd.cli import main
sys.exit(main(sys.argv[2:]))
"""


def serve(
    org: Path, state: Path, without: str = "", *more: str
) -> subprocess.CompletedProcess[str]:
    """``roster serve`` on *org*, for a start that is to fail."""
    argv = ["serve", "--org", str(org), "--state", str(state), *more]
    return subprocess.run(
        [sys.executable, "-c", _SERVE, without, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("module", "table", "extra"),
    [
        ("prometheus_client", '[metrics]\nlisten = "127.0.0.1:9"', "metrics"),
        ("opentelemetry.sdk", '[telemetry]\notlp_endpoint = "http://127.0.0.1:9"', "telemetry"),
        ("starlette", '[inspect]\nlisten = "127.0.0.1:0"', "inspect"),
    ],
)
def test_a_missing_extra_fails_the_start_naming_it(
    org_dir: Path, tmp_path: Path, module: str, table: str, extra: str
) -> None:
    with (org_dir / "org.toml").open("a") as toml:
        toml.write(f"\n{table}\n")
    done = serve(org_dir, tmp_path / "state", without=module)
    assert done.returncode == 1
    assert f"needs the {extra} extra" in done.stderr
    assert f"pip install 'rosterd[{extra}]'" in done.stderr
    assert not (tmp_path / "state" / "rosterd.sock").exists()


def test_serve_metrics_takes_the_same_address_rules(org_dir: Path, tmp_path: Path) -> None:
    done = serve(org_dir, tmp_path / "state", "", "--metrics", "0.0.0.0:9464")
    assert done.returncode == 1
    assert "--metrics: listen = '0.0.0.0:9464' is not a loopback address" in done.stderr
    assert not (tmp_path / "state" / "rosterd.sock").exists()
