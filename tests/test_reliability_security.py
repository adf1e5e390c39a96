"""Who may connect, and what never leaks: peer credentials and secret values.

The socket file's 0660 mode is checked in test_daemon_protocol.py; here a
process of a second uid reaches the socket (its group may write it) and is
refused by the SO_PEERCRED check before any method runs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from harness import HOLD_CONNECTIONS, DaemonProcess, set_daemon, set_engine
from simulator import Simulator, Status

from rosterd.client import RosterClient, RpcError

NOBODY = 65534
SYSTEM_PYTHON = Path("/usr/bin/python3")
# Stdlib only: the second uid cannot read this checkout's virtualenv.
_CLIENT = """
import json, socket, sys
sock = socket.socket(socket.AF_UNIX)
sock.settimeout(10)
sock.connect(sys.argv[1])
data, closed = b"", False
try:
    sock.sendall(b"".join(line.encode() + b"\\n" for line in sys.argv[2:]))
except (BrokenPipeError, ConnectionResetError):
    pass  # a refusing daemon may close before our request is all written
try:
    while data.count(b"\\n") < len(sys.argv) - 2:
        chunk = sock.recv(65536)
        if not chunk:
            closed = True
            break
        data += chunk
except ConnectionResetError:
    closed = True
print(json.dumps({"replies": [json.loads(l) for l in data.splitlines()], "closed": closed}))
"""


def call(request_id: int, method: str, **params: object) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def second_uid_available() -> str | None:
    if os.geteuid() != 0:
        return "needs root to run a client as a second uid"
    if shutil.which("setpriv") is None:
        return "setpriv is not installed"
    if not SYSTEM_PYTHON.exists():
        return f"{SYSTEM_PYTHON} is needed for the second uid's client"
    return None


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A socket directory the second uid can traverse (pytest's tmp dirs are
    0700); the test is skipped where no client can run as a second uid."""
    if reason := second_uid_available():
        pytest.skip(reason)
    path = Path(tempfile.mkdtemp(prefix="rosterd-peer-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


async def as_nobody(socket: Path, *lines: str) -> dict[str, Any]:
    command = [
        "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
        str(SYSTEM_PYTHON), "-c", _CLIENT, str(socket), *lines,
    ]  # fmt: skip
    with anyio.fail_after(20):
        done = await anyio.run_process(command, check=False)
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def start_shared(org: Path, state: Path, socket_dir: Path, daemon_toml: str) -> DaemonProcess:
    set_daemon(org, daemon_toml)
    process = DaemonProcess(org, state, socket_path=socket_dir / "rosterd.sock").start()
    # The operator's shared group: nobody's gid may write the 0660 socket.
    os.chown(process.socket, 0, NOBODY)
    return process


async def memory_texts(process: DaemonProcess) -> list[str]:
    async with await process.client() as client:
        items = await client.memory_list("ada")
    return [item.text for item in items]


@pytest.mark.anyio
async def test_a_client_of_another_uid_is_refused_before_any_method_runs(
    org_dir: Path, tmp_path: Path, socket_dir: Path
) -> None:
    process = start_shared(org_dir, tmp_path / "state", socket_dir, "")
    try:
        seen = await as_nobody(
            process.socket,
            call(1, "memory.add", worker="ada", text="written by nobody"),
            call(2, "daemon.status"),
        )
        assert await memory_texts(process) == []
    finally:
        process.stop()
    (refusal,) = seen["replies"]
    assert refusal["id"] is None
    assert refusal["error"]["code"] == 1006
    assert f"uid {NOBODY} is not allowed" in refusal["error"]["message"]
    assert seen["closed"]
    assert f"uid {NOBODY} gid {NOBODY}" in process.log()


@pytest.mark.anyio
@pytest.mark.parametrize("allow", [f"allow_uids = [0, {NOBODY}]\n", f"allow_gids = [{NOBODY}]\n"])
async def test_a_client_of_an_allowed_uid_or_gid_is_served(
    org_dir: Path, tmp_path: Path, socket_dir: Path, allow: str
) -> None:
    process = start_shared(org_dir, tmp_path / "state", socket_dir, allow)
    try:
        seen = await as_nobody(
            process.socket,
            call(1, "memory.add", worker="ada", text="written by nobody"),
            call(2, "daemon.status"),
        )
        assert await memory_texts(process) == ["written by nobody"]
    finally:
        process.stop()
    added, status = seen["replies"]
    assert added["result"]["text"] == "written by nobody"
    assert status["result"]["pid"] > 0
    assert not seen["closed"]


@asynccontextmanager
async def holding(socket: Path, uid: int, count: int) -> AsyncIterator[list[int]]:
    command = [
        # gid nobody: the socket's group, so any of these uids may write it.
        "setpriv", f"--reuid={uid}", f"--regid={NOBODY}", "--clear-groups",
        str(SYSTEM_PYTHON), "-c", HOLD_CONNECTIONS, str(socket), str(count),
    ]  # fmt: skip
    async with await anyio.open_process(command) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        line = b""
        with anyio.fail_after(20):
            while not line.endswith(b"\n"):
                line += await holder.stdout.receive()
        try:
            yield json.loads(line)
        finally:
            await holder.stdin.aclose()
            await holder.wait()


@pytest.mark.anyio
async def test_one_uid_holds_at_most_its_share_of_connections_and_others_still_get_in(
    org_dir: Path, tmp_path: Path, socket_dir: Path
) -> None:
    other = NOBODY - 1
    allow = f"allow_uids = [0, {NOBODY}, {other}]\nmax_connections = 8\nidle_timeout_s = 600\n"
    process = start_shared(org_dir, tmp_path / "state", socket_dir, allow)
    try:
        # A quarter of max_connections each: the hog cannot take the rest.
        async with (
            holding(process.socket, NOBODY, 10) as hog,
            holding(process.socket, other, 2) as neighbour,
            await process.client() as client,
        ):
            status = await client.daemon_status()
    finally:
        process.stop()
    assert hog == [0, 0] + [1007] * 8
    assert neighbour == [0, 0]
    assert status.sessions == 0


# Secrets --------------------------------------------------------------------------


def everything_under(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_socket():
            yield path, path.read_bytes()


@pytest.mark.anyio
async def test_secret_values_never_reach_a_prompt_trace_log_reply_or_error(
    org_dir: Path, tmp_path: Path, simulator: Simulator
) -> None:
    github_token = f"ghp_SECRET{secrets.token_hex(12)}"
    api_key = f"sk-SECRET{secrets.token_hex(12)}"
    simulator.api_key = api_key
    set_engine(
        org_dir,
        f'kind = "openai"\nmodel = "sim-1"\nbase_url = "{simulator.openai_url}"\n'
        'api_key_env = "ROSTER_TEST_KEY"\nmax_retries = 1',
    )
    env = {"GITHUB_TOKEN": github_token, "ROSTER_TEST_KEY": api_key}
    process = DaemonProcess(org_dir, tmp_path / "state", env=env).start()
    replies: list[bytes] = []
    errors: list[RpcError] = []

    async def record(client: RosterClient, method: str, **params: object) -> Any:
        # Untyped on purpose: each reply is kept with every field the daemon sent
        # (a typed result drops any field its Struct does not declare, and a leak
        # there would go unseen); the task polling loop below reads it as a dict too.
        try:
            result = await client.call(method, params)
        except RpcError as exc:
            errors.append(exc)
            replies.append(msgspec.json.encode([exc.code, str(exc), exc.data]))
            return None
        replies.append(msgspec.json.encode(result))
        return result

    try:
        async with await process.client() as client:
            opened = await record(client, "session.open", worker="ada", channel="general")
            session = opened["session"]
            await record(client, "session.send", session=session, text="what can you reach?")
            await record(client, "memory.add", worker="ada", text="uses $GITHUB_TOKEN for API")
            gate = await record(client, "gate.file", worker="ada", summary="may I push?")
            await record(client, "gate.resolve", gate=gate["id"], outcome="yes")
            simulator.script(Status(500, "upstream exploded"), Status(500, "upstream exploded"))
            await record(client, "session.send", session=session, text="this one fails")
            simulator.api_key = "sk-the-provider-wants-another-key"
            await record(client, "session.send", session=session, text="rejected key")
            await record(client, "run.direct", worker="ada", text="rejected key, direct")
            simulator.api_key = api_key
            task = await record(client, "task.submit", worker="ada", channel="releases", text="go")
            state = await record(client, "task.get", task=task["id"], wait=10)
            assert state["status"] == "done"
            await record(client, "session.send", session=session, text="works again")
            await record(client, "daemon.status")
            for run in await record(client, "runs.list"):
                await record(client, "runs.show", run=run["id"])
                await record(client, "runs.context", run=run["id"], all=True)
    finally:
        process.stop()

    assert sorted(e.code for e in errors) == [1002, 1002, 1002]
    assert {e.data["status"] for e in errors} == {401, 500}
    assert any("[redacted]" in str(e) for e in errors)  # the 401 quoted the key back
    # The secret values exist only where they must: the Authorization header.
    assert all(r.headers.get("authorization") in (f"Bearer {api_key}",) for r in simulator.requests)
    prompts = [r.body for r in simulator.requests]
    assert any(b"$GITHUB_TOKEN" in body for body in prompts)  # the name is shown, by design
    files = list(everything_under(process.state))
    assert any(path.name == "context.jsonl" for path, _ in files)
    for secret in (github_token.encode(), api_key.encode()):
        for path, data in files:
            assert secret not in data, path
        assert secret not in process.log().encode()
        assert all(secret not in reply for reply in replies)
        assert all(secret not in body for body in prompts)
