"""A real Prometheus server for the tests, and its ``promtool``.

Both come from the system package ``prometheus``; ``.ci/run`` installs it
where it is missing. A test that needs them and finds neither fails with
the install line, it never skips.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest

__all__ = ("PrometheusServer", "free_port", "prometheus_server", "promtool")

INSTALL = "apt-get install prometheus"
# Scrapes and rule rounds this often, so a test waits about a second.
_INTERVAL = "1s"
_READY_S = 30.0


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: {INSTALL}")
    return found


def promtool(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [_binary("promtool"), *args], input=stdin, capture_output=True, timeout=60, check=False
    )


class PrometheusServer:
    """A running ``prometheus`` scraping *target* every second."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self._process = process
        self._log = log

    def __repr__(self) -> str:
        return f"PrometheusServer({self.url})"

    async def query(self, expression: str) -> float | None:
        """The value of an instant query that yields one sample, or ``None``."""
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"{self.url}/api/v1/query", params={"query": expression})
        answer.raise_for_status()
        result = answer.json()["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    async def check(self, expression: str) -> None:
        """Prometheus accepts and evaluates *expression* (its answer has no error)."""
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"{self.url}/api/v1/query", params={"query": expression})
        assert answer.status_code == 200, (expression, answer.text)
        assert answer.json()["status"] == "success", (expression, answer.text)

    async def until(self, expression: str, expected: float) -> None:
        """Wait until *expression* is *expected*: Prometheus scrapes on its own
        schedule, so its next scrapes are what there is to wait for (30 s at most)."""
        seen = None
        for _ in range(150):
            seen = await self.query(expression)
            if seen == expected:
                return
            await anyio.sleep(0.2)
        raise AssertionError(f"{expression} is {seen}, not {expected}: {self.log()}")

    def log(self) -> str:
        return self._log.read_text(errors="replace")[-4000:]


@contextmanager
def prometheus_server(root: Path, target: str) -> Iterator[PrometheusServer]:
    """Prometheus on a free loopback port, its data under *root*, scraping *target*."""
    binary = _binary("prometheus")
    root.mkdir(parents=True, exist_ok=True)
    config = root / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {_INTERVAL}\n  evaluation_interval: {_INTERVAL}\n"
        "scrape_configs:\n  - job_name: rosterd\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    listen = f"127.0.0.1:{free_port()}"
    log = root / "prometheus.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address={listen}",
            ],
            stdout=output,
            stderr=output,
        )
    server = PrometheusServer(f"http://{listen}", process, log)
    try:
        _wait_ready(server, process)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(server: PrometheusServer, process: subprocess.Popen[bytes]) -> None:
    """Until ``/-/ready`` says so; Prometheus has no readiness signal but its API."""
    with httpx.Client(timeout=2.0) as client:
        for _ in range(int(_READY_S / 0.1)):
            if process.poll() is not None:
                raise AssertionError(f"prometheus exited: {server.log()}")
            try:
                if client.get(f"{server.url}/-/ready").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            process_wait(process, 0.1)
    raise AssertionError(f"prometheus did not get ready: {server.log()}")


def process_wait(process: subprocess.Popen[bytes], seconds: float) -> None:
    """Wait up to *seconds* for *process* to exit (it should not): the pause
    between readiness probes doubles as a check that it is still running."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return
