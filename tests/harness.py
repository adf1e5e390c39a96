"""Real daemon processes for tests: start, talk over the socket, stop, kill -9."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from rosterd.client import RosterClient

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_ORG = REPO / "examples" / "org"
_START = "import sys; from rosterd.cli import main; sys.exit(main(sys.argv[1:]))"


def run_bench(script: str, *args: str, timeout: float = 110.0) -> str:
    """Run ``bench/<script>`` as its own process; its stdout, once it exited 0."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def copy_org(destination: Path) -> Path:
    shutil.copytree(EXAMPLE_ORG, destination)
    return destination


def set_engine(org: Path, engine: str) -> None:
    """Replace the example org's ``kind = "echo"`` engine with *engine* (TOML lines)."""
    toml = org / "org.toml"
    text = toml.read_text()
    assert 'kind = "echo"' in text, "set_engine expects the example org's echo engine"
    toml.write_text(text.replace('kind = "echo"', engine))


class DaemonProcess:
    """``roster serve`` as a child process with its log in a file."""

    def __init__(
        self,
        org: Path,
        state: Path,
        *,
        env: Mapping[str, str] | None = None,
        socket_path: Path | None = None,
    ) -> None:
        self.org = org
        self.state = state
        self.socket = socket_path or state / "rosterd.sock"
        self.log_path = state.parent / f"{state.name}.log"
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"DaemonProcess({self.state}, pid={self.process.pid if self.process else None})"

    def command(self) -> list[str]:
        return [
            sys.executable, "-c", _START, "serve", "--org", str(self.org),
            "--state", str(self.state), "--socket", str(self.socket), "--log-level", "DEBUG",
        ]  # fmt: skip

    def start(self, *, wait: bool = True, pass_fds: tuple[int, ...] = ()) -> DaemonProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it from here
        self.process = subprocess.Popen(
            self.command(), stdout=log, stderr=log, env=self.env, pass_fds=pass_fds
        )
        log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"daemon exited with {self.process.returncode}:\n{self.log()}")
            if "ready on" in self.log():
                with socket.socket(socket.AF_UNIX) as probe:
                    try:
                        probe.connect(str(self.socket))
                        return
                    except OSError:
                        pass
            time.sleep(0.02)
        raise AssertionError(f"daemon not ready after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    async def client(self) -> RosterClient:
        return await RosterClient.connect(self.socket)


def make_org(root: Path, channels: int, *, engine: str = 'kind = "echo"') -> Path:
    """An org with one worker, ``ada``, member of channels c0 .. c<n-1>."""
    (root / "workers" / "ada").mkdir(parents=True)
    (root / "workers" / "ada" / "identity.md").write_text("You are Ada, a careful engineer.\n")
    lines = [f"[engine]\n{engine}\n", "[workers.ada]\n"]
    for n in range(channels):
        lines.append(f'[channels.c{n}]\nworkers = ["ada"]\n')
        (root / "channels" / f"c{n}").mkdir(parents=True)
        (root / "channels" / f"c{n}" / "purpose.md").write_text(f"Channel {n}.\n")
    (root / "org.toml").write_text("\n".join(lines))
    return root
