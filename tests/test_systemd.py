"""systemd integration: sd_notify datagrams, the watchdog, socket activation, the unit files."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from rosterd._errors import ConfigError
from rosterd.cli._parser import build_parser
from rosterd.daemon._systemd import Notifier, listen_fds, watchdog_interval

REPO = Path(__file__).resolve().parent.parent
SERVICE = REPO / "systemd" / "rosterd.service"
SOCKET = REPO / "systemd" / "rosterd.socket"


async def _receive(receiver: anyio.abc.UNIXDatagramSocket) -> bytes:
    with anyio.fail_after(5):
        data, _ = await receiver.receive()
    return data


# --- sd_notify ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_notifications_arrive_exactly_on_a_path_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    environ = {"NOTIFY_SOCKET": str(path), "HOME": "/nonexistent"}
    async with await anyio.create_unix_datagram_socket(local_path=path) as receiver:
        notifier = Notifier.from_env(environ)
        assert environ == {"HOME": "/nonexistent"}
        async with notifier:
            assert await notifier.ready(status="serving 3 workers")
            assert await _receive(receiver) == b"READY=1\nSTATUS=serving 3 workers\n"
            assert await notifier.watchdog()
            assert await _receive(receiver) == b"WATCHDOG=1\n"
            assert await notifier.status("org.toml broken:\n  line 3")
            assert await _receive(receiver) == b"STATUS=org.toml broken: line 3\n"
            assert await notifier.stopping()
            assert await _receive(receiver) == b"STOPPING=1\n"
            assert await notifier.notify(EXTEND_TIMEOUT_USEC="5000000", STATUS="draining")
            assert await _receive(receiver) == b"EXTEND_TIMEOUT_USEC=5000000\nSTATUS=draining\n"
            assert "connected" in repr(notifier)
        assert "closed" in repr(notifier)


@pytest.mark.anyio
async def test_abstract_namespace_socket() -> None:
    name = f"rosterd-test-{uuid.uuid4().hex}"
    environ = {"NOTIFY_SOCKET": f"@{name}"}
    async with (
        await anyio.create_unix_datagram_socket(local_path=f"\0{name}") as receiver,
        Notifier.from_env(environ) as notifier,
    ):
        assert await notifier.ready()
        assert await _receive(receiver) == b"READY=1\n"
    assert "NOTIFY_SOCKET" not in environ


@pytest.mark.anyio
async def test_concurrent_notifications_all_arrive(tmp_path: Path) -> None:
    # More senders than the kernel queues datagrams for (net.unix.max_dgram_qlen,
    # 10 by default): the extra ones wait for room instead of failing or colliding.
    path = tmp_path / "notify"
    received: set[bytes] = set()
    async with await anyio.create_unix_datagram_socket(local_path=path) as receiver:

        async def collect() -> None:
            while len(received) < 40:
                received.add(await _receive(receiver))

        async with Notifier.from_env({"NOTIFY_SOCKET": str(path)}) as notifier:
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    for i in range(40):
                        tg.start_soon(notifier.status, f"turn {i}")
                    tg.start_soon(collect)
    assert received == {f"STATUS=turn {i}\n".encode() for i in range(40)}


@pytest.mark.anyio
async def test_no_notify_socket_is_a_no_op() -> None:
    environ = {"PATH": "/usr/bin"}
    async with Notifier.from_env(environ) as notifier:
        assert not notifier.enabled
        assert await notifier.ready() is False
        assert await notifier.watchdog() is False
        assert "disabled" in repr(notifier)
    assert environ == {"PATH": "/usr/bin"}


@pytest.mark.anyio
async def test_unsupported_address_is_popped_and_disabled(caplog: pytest.LogCaptureFixture) -> None:
    environ = {"NOTIFY_SOCKET": "vsock:2:1234"}
    with caplog.at_level(logging.WARNING, logger="rosterd.daemon"):
        notifier = Notifier.from_env(environ)
    assert environ == {}
    assert not notifier.enabled
    assert "vsock:2:1234" in caplog.text
    async with notifier:
        assert await notifier.ready() is False


@pytest.mark.anyio
async def test_unreachable_socket_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "gone"
    async with Notifier.from_env({"NOTIFY_SOCKET": str(missing)}) as notifier:
        with caplog.at_level(logging.WARNING, logger="rosterd.daemon"):
            assert await notifier.ready() is False
    assert str(missing) in caplog.text


@pytest.mark.anyio
async def test_forged_fields_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    async with (
        await anyio.create_unix_datagram_socket(local_path=path),
        Notifier.from_env({"NOTIFY_SOCKET": str(path)}) as notifier,
    ):
        with pytest.raises(ValueError, match="not a notification field"):
            await notifier.notify(STATUS="ok\nREADY=1")
        with pytest.raises(ValueError, match="not a notification field"):
            await notifier.notify(ready="1")
        with pytest.raises(ValueError, match="bytes"):
            await notifier.notify()
        with pytest.raises(ValueError, match="bytes"):
            await notifier.notify(STATUS="x" * 5000)


@pytest.mark.anyio
async def test_long_status_is_shortened_to_one_datagram(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    async with (
        await anyio.create_unix_datagram_socket(local_path=path) as receiver,
        Notifier.from_env({"NOTIFY_SOCKET": str(path)}) as notifier,
    ):
        assert await notifier.status("é" * 5000)
        data = await _receive(receiver)
    assert data == b"STATUS=" + ("é" * 512).encode() + b"\n"


@pytest.mark.anyio
async def test_notify_after_close_raises(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    async with await anyio.create_unix_datagram_socket(local_path=path):
        notifier = Notifier.from_env({"NOTIFY_SOCKET": str(path)})
        async with notifier:
            assert await notifier.watchdog()
        with pytest.raises(anyio.ClosedResourceError):
            await notifier.watchdog()


# --- watchdog -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 30.0),
        ({"WATCHDOG_USEC": "1500000", "WATCHDOG_PID": str(os.getpid())}, 1.5),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getppid())}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "not-a-pid"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_PID": str(os.getpid())}, None),
        ({}, None),
    ],
)
def test_watchdog_interval(environ: dict[str, str], expected: float | None) -> None:
    before = dict(environ)
    assert watchdog_interval(environ) == expected
    assert environ == before


# --- socket activation ----------------------------------------------------------------------

# Plays systemd's part after fork: moves the inherited fd onto fd 3, names this
# process in LISTEN_PID, then calls listen_fds() and reports what it got.
_ACTIVATED_CHILD = """
import json, os, socket, sys
from rosterd._errors import ConfigError
from rosterd.daemon._systemd import listen_fds

inherited = int(sys.argv[1])
if inherited != 3:
    os.dup2(inherited, 3)
    os.close(inherited)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1", LISTEN_FDNAMES="rosterd.socket")
report = {}
try:
    sockets = listen_fds()
except ConfigError as exc:
    report["error"] = str(exc)
else:
    [sock] = sockets
    report["fileno"] = sock.fileno()
    report["inheritable"] = os.get_inheritable(sock.fileno())
    report["family"] = sock.family.name
    report["type"] = sock.type.name
    report["name"] = sock.getsockname()
    conn, _ = sock.accept()
    with conn:
        conn.sendall(b"hello from fd 3")
report["left"] = sorted(k for k in os.environ if k.startswith("LISTEN_"))
print(json.dumps(report))
"""


def _run_activated(fd: int) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}
    done = subprocess.run(
        [sys.executable, "-c", _ACTIVATED_CHILD, str(fd)],
        pass_fds=(fd,),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_listen_fds_takes_over_a_listening_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "rosterd.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            # Queued in the backlog: only the child, via fd 3, can accept it.
            client.connect(path)
            client.settimeout(60)
            report = _run_activated(server.fileno())
            assert client.recv(100) == b"hello from fd 3"
    assert report == {
        "fileno": 3,
        "inheritable": False,
        "family": "AF_UNIX",
        "type": "SOCK_STREAM",
        "name": path,
        "left": [],
    }


def test_listen_fds_refuses_an_fd_that_is_not_a_socket(tmp_path: Path) -> None:
    with (tmp_path / "plain").open("w") as plain:
        report = _run_activated(plain.fileno())
    assert report["left"] == []
    assert "fd 3, which is not a usable socket" in str(report["error"])


def test_listen_fds_of_another_process_are_ignored_and_popped() -> None:
    environ = {
        "LISTEN_PID": str(os.getppid()),
        "LISTEN_FDS": "1",
        "LISTEN_FDNAMES": "rosterd.socket",
        "PATH": "/usr/bin",
    }
    assert listen_fds(environ) == []
    assert environ == {"PATH": "/usr/bin"}


@pytest.mark.parametrize("environ", [{}, {"LISTEN_FDS": "1"}, {"LISTEN_PID": "-"}])
def test_listen_fds_without_activation(environ: dict[str, str]) -> None:
    assert listen_fds(environ) == []
    assert environ == {}


def test_listen_fds_zero_for_us() -> None:
    assert listen_fds({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "0"}) == []


@pytest.mark.parametrize("count", ["many", "-1"])
def test_malformed_listen_fds_for_us_is_a_config_error(count: str) -> None:
    environ = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": count}
    with pytest.raises(ConfigError) as caught:
        listen_fds(environ)
    assert caught.value.key == "LISTEN_FDS"
    assert environ == {}


# --- unit files -----------------------------------------------------------------------------


def _parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> every value in order (systemd keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}: directive before any section: {line}"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not a directive: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _one(section: dict[str, list[str]], key: str) -> str:
    values = section[key]
    assert len(values) == 1, f"{key} is set {len(values)} times"
    return values[0]


def test_service_unit_directives() -> None:
    service = _parse_unit(SERVICE)["Service"]
    expected = {
        "Type": "notify",
        "NotifyAccess": "main",
        "WatchdogSec": "30",
        "Restart": "on-failure",
        "KillSignal": "SIGTERM",
        "RuntimeDirectory": "rosterd",
        "RuntimeDirectoryPreserve": "yes",
        "StateDirectory": "rosterd",
        "User": "rosterd",
        "DynamicUser": "no",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes",
        "ProtectControlGroups": "yes",
        "ProtectClock": "yes",
        "ProtectHostname": "yes",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
        "RestrictNamespaces": "yes",
        "LockPersonality": "yes",
        "MemoryDenyWriteExecute": "yes",
        "RestrictRealtime": "yes",
        "RestrictSUIDSGID": "yes",
        "SystemCallArchitectures": "native",
        "CapabilityBoundingSet": "",
        "AmbientCapabilities": "",
        "ReadOnlyPaths": "/etc/roster",
        # Far above max_connections' default 1024 plus state files and providers:
        # the usual soft limit of 1024 would run out of descriptors first.
        "LimitNOFILE": "8192",
    }
    assert {key: _one(service, key) for key in expected} == expected
    assert service["SystemCallFilter"][0] == "@system-service"
    # Draining turns needs far longer than systemd's 90 s default would allow for
    # an engine call with retries, but must still end.
    assert 120 <= int(_one(service, "TimeoutStopSec")) <= 600


def test_service_paths_come_from_the_documented_variables() -> None:
    service = _parse_unit(SERVICE)["Service"]
    environment = dict(v.split("=", 1) for v in service["Environment"])
    assert environment == {"ROSTER_ORG": "/etc/roster/org", "ROSTER_STATE": "/var/lib/rosterd"}
    assert _one(service, "ExecStart") == (
        "/usr/bin/env roster serve --org ${ROSTER_ORG} --state ${ROSTER_STATE}"
    )
    # The default state directory is the one StateDirectory= makes writable.
    assert environment["ROSTER_STATE"] == "/var/lib/" + _one(service, "StateDirectory")
    assert environment["ROSTER_ORG"].startswith(_one(service, "ReadOnlyPaths") + "/")


def test_socket_unit_matches_the_service() -> None:
    units = _parse_unit(SOCKET)
    sock = units["Socket"]
    service = _parse_unit(SERVICE)["Service"]
    assert _one(sock, "SocketMode") == "0660"
    assert _one(sock, "SocketUser") == _one(service, "User")
    assert _one(sock, "SocketGroup") == _one(service, "Group")
    assert _one(sock, "Service") == SERVICE.name
    # docs/protocol.md, Connecting: the socket lives at $RUNTIME_DIRECTORY/rosterd.sock.
    runtime = "/run/" + _one(service, "RuntimeDirectory")
    assert _one(sock, "ListenStream") == f"{runtime}/rosterd.sock"
    assert _one(units["Install"], "WantedBy") == "sockets.target"


_ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(_ANALYZE is None, reason="systemd-analyze is not installed")


@needs_analyze
def test_systemd_analyze_verify() -> None:
    assert _ANALYZE is not None
    done = subprocess.run(
        [_ANALYZE, "verify", str(SERVICE), str(SOCKET)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Other units on the host may draw warnings of their own; ours must draw none.
    ours = [line for line in done.stderr.splitlines() if "rosterd" in line]
    assert (done.returncode, ours) == (0, [])


@needs_analyze
def test_systemd_analyze_security_exposure() -> None:
    assert _ANALYZE is not None
    usage = subprocess.run([_ANALYZE, "security", "--help"], capture_output=True, text=True)
    if "--offline" not in usage.stdout:
        pytest.skip("this systemd-analyze has no security --offline (systemd < 250)")
    done = subprocess.run(
        [_ANALYZE, "security", "--offline=yes", "--no-pager", str(SERVICE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    match = re.search(r"Overall exposure level for rosterd\.service: (\d+\.\d+)", done.stdout)
    assert match is not None, done.stdout
    assert float(match.group(1)) <= 2.0, done.stdout


BRIDGE = REPO / "systemd" / "rosterd-irc.service"


@needs_analyze
def test_the_irc_bridge_unit_verifies_and_runs_a_command_roster_takes() -> None:
    assert _ANALYZE is not None
    done = subprocess.run(
        [_ANALYZE, "verify", str(BRIDGE), str(SOCKET)], capture_output=True, text=True, timeout=60
    )
    ours = [line for line in done.stderr.splitlines() if "rosterd" in line]
    assert (done.returncode, ours) == (0, [])
    text = BRIDGE.read_text()
    values = dict(re.findall(r"^Environment=(\w+)=(\S+)$", text, re.M))
    (command,) = re.findall(r"^ExecStart=/usr/bin/env roster (.*)$", text, re.M)
    argv = re.sub(r"\$\{(\w+)\}", lambda m: values[m[1]], command).split()
    args = build_parser().parse_args(argv)
    assert (args.handler, args.nick, args.map) == ("bridge irc", "ada", ["#general=general"])
