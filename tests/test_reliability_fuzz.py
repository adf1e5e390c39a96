"""Protocol fuzzing against one running daemon: every line gets an answer, nothing crashes.

Hypothesis drives a plain blocking socket (no fixtures inside ``@given``), so
one daemon, started once for the module, serves every case on one connection.
After each fuzzed line the test sends a ping on the same connection: a bad
line must never cost the connection its next request.
"""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from harness import DaemonProcess, copy_org, opened_session
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rosterd.protocol import LINE_LIMIT, METHODS

CASES = 500
ERROR_CODES = {-32700, -32600, -32601, -32602, *range(1001, 1011)}
FIELDS = sorted({f for kind in METHODS.values() for f in kind.__struct_encode_fields__})
IDS = ["ada", "grace", "general", "releases", "../etc", "", "a" * 65, "g-1", "task-1", "m-1"]

# One daemon takes all the fuzzing, so the module runs on one xdist worker, in order.
pytestmark = pytest.mark.xdist_group("fuzz")


@pytest.fixture(scope="module")
def fuzz_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("fuzz")
    process = DaemonProcess(copy_org(root / "org"), root / "state").start()
    yield process
    process.stop()


class LineClient:
    """A blocking JSON-lines client that reads exactly what it is sent."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(20)
        try:
            self.sock.connect(str(path))
        except OSError:
            self.sock.close()
            raise
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> dict[str, Any]:
        """The next reply, skipping ``turn.delta`` notifications of a streamed turn."""
        while True:
            message = self.line()
            if message.get("method") != "turn.delta" or "id" in message:
                return message

    def line(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise AssertionError("the daemon closed the connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        self.sock.close()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
params = (
    st.dictionaries(
        st.sampled_from(FIELDS) | st.text(max_size=8),
        st.sampled_from(IDS) | json_values,
        max_size=5,
    )
    | json_values
)
request_objects = st.fixed_dictionaries(
    {
        "jsonrpc": st.sampled_from(["2.0", "2.0", "2.0", "1.0"]) | json_values,
        "method": st.sampled_from([*METHODS, "no.such", "", "daemon.status "]) | st.text(),
    },
    optional={"id": st.integers() | st.text(max_size=10) | json_values, "params": params},
)
requests = request_objects.map(lambda r: json.dumps(r).encode())


@st.composite
def plausible(draw: st.DrawFn) -> bytes:
    """A known method with its own fields, each value right or of a wrong type."""
    method = draw(st.sampled_from(sorted(METHODS)))
    fields = METHODS[method].__struct_encode_fields__
    chosen = draw(st.lists(st.sampled_from(fields), unique=True)) if fields else []
    values = st.sampled_from(IDS) | st.text(max_size=30) | json_values
    request = {
        "jsonrpc": "2.0",
        "id": draw(st.integers(0, 1 << 40) | st.text(max_size=8)),
        "method": method,
        "params": {name: draw(values) for name in chosen},
    }
    return json.dumps(request, ensure_ascii=draw(st.booleans())).encode()


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A request with invalid UTF-8, a NUL or a control byte spliced in."""
    line = draw(requests)
    at = draw(st.integers(0, len(line)))
    junk = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\x01", b"\x80"]))
    return line[:at] + junk + line[at:]


@st.composite
def truncated(draw: st.DrawFn) -> bytes:
    line = draw(requests)
    return line[: draw(st.integers(0, max(0, len(line) - 1)))]


@st.composite
def deep(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(100, 100_000))
    opener = draw(st.sampled_from([b"[", b'{"a":']))
    nested = opener * depth + draw(
        st.sampled_from([b"", (b"]" if opener == b"[" else b"}") * depth])
    )
    where = draw(st.sampled_from(["bare", "params", "id"]))
    if where == "bare":
        return nested
    return b'{"jsonrpc":"2.0","id":1,"method":"daemon.status","%s":%s}' % (where.encode(), nested)


@st.composite
def huge(draw: st.DrawFn) -> bytes:
    size = draw(st.integers(LINE_LIMIT - 64, LINE_LIMIT + 4096))
    head = b'{"jsonrpc":"2.0","id":"big","method":"memory.list","params":{"worker":"ada","x":"'
    return head + b"a" * max(0, size - len(head) - 3) + b'"}}'


lines = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(str.encode),
    requests,
    plausible(),
    plausible(),
    damaged(),
    truncated(),
    deep(),
    huge(),
)


def expected_id(line: bytes) -> object:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value.get("id") if isinstance(value, dict) else None


def kind_of(line: bytes) -> list[str]:
    kinds = []
    if len(line) > LINE_LIMIT:
        kinds.append("over 1 MiB")
    if line.count(b"[") > 1000 or line.count(b"{") > 1000:
        kinds.append("deeply nested")
    if b"\x00" in line:
        kinds.append("NUL")
    try:
        line.decode()
    except UnicodeDecodeError:
        kinds.append("invalid UTF-8")
    return kinds or ["other"]


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"[" * 100_000, -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"daemon.status","params":' + b"[" * 100_000, -32700),
        (
            b'{"jsonrpc":"2.0","id":2,"method":"memory.list","params":{"worker":' + b"[" * 5000,
            -32700,
        ),
        (b'{"jsonrpc":"2.0","id":3,"method":"daemon.status","junk":"\xff"}', -32700),
        (b'{"jsonrpc":"2.0","id":4,"method":"daemon.status","junk":"\x00"}', -32700),
        (b'{"jsonrpc":"2.0","id":5,"method":"daemon.status"}\x00', -32700),
    ],
    ids=["100k-brackets", "deep-params", "deep-field", "utf8-in-skipped-field", "nul", "nul-tail"],
)
def test_lines_that_once_crashed_or_passed_get_errors(
    fuzz_daemon: DaemonProcess, line: bytes, code: int
) -> None:
    client = LineClient(fuzz_daemon.socket)
    try:
        client.send(line + b"\n" + b'{"jsonrpc":"2.0","id":"after","method":"daemon.status"}\n')
        reply = client.reply()
        after = client.reply()
    finally:
        client.close()
    assert reply["error"]["code"] == code, reply
    assert after["id"] == "after" and after["result"]["pid"] > 0


@pytest.mark.long
def test_fuzzed_lines_get_json_rpc_replies_and_the_daemon_survives(
    fuzz_daemon: DaemonProcess,
) -> None:
    client = LineClient(fuzz_daemon.socket)
    codes: Counter[str] = Counter()
    kinds: Counter[str] = Counter()

    @settings(
        max_examples=CASES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(line=lines)
    def one_line(line: bytes) -> None:
        nonlocal client
        try:
            check_line(line)
        except BaseException:
            # Start the next case on a clean connection, not mid-reply.
            client.close()
            client = LineClient(fuzz_daemon.socket)
            raise

    def check_line(line: bytes) -> None:
        line = line.replace(b"\n", b" ")
        kinds.update(kind_of(line))
        ping = f"ping-{sum(codes.values())}"
        client.send(
            line
            + b"\n"
            + json.dumps({"jsonrpc": "2.0", "id": ping, "method": "daemon.status"}).encode()
            + b"\n"
        )
        reply = client.reply()
        if reply.get("id") != ping or "result" not in reply:
            assert line.strip(), "a blank line got a reply"
            assert reply["jsonrpc"] == "2.0"
            assert ("result" in reply) != ("error" in reply), reply
            if "error" in reply:
                error = reply["error"]
                assert error["code"] in ERROR_CODES, error
                assert isinstance(error["message"], str) and error["message"]
                codes[str(error["code"])] += 1
            else:
                codes["result"] += 1
            if reply["id"] is not None:
                assert reply["id"] == expected_id(line)
            reply = client.reply()
        else:
            # No reply of its own: a blank line or a well-formed notification.
            parsed = json.loads(line) if line.strip() else {}
            assert isinstance(parsed, dict) and "id" not in parsed, line[:200]
            codes["no reply"] += 1
        assert reply["id"] == ping and reply["result"]["pid"] > 0

    try:
        one_line()
    finally:
        client.close()
    cases = sum(codes.values())
    print(f"\nfuzz: {cases} lines tried on one connection; replies by code: {dict(codes)}")
    print(f"fuzz: lines by kind: {dict(kinds)}")
    assert cases >= CASES * 3 // 4
    assert fuzz_daemon.process is not None and fuzz_daemon.process.poll() is None
    assert "internal error" not in fuzz_daemon.log()


@pytest.mark.anyio
async def test_a_well_behaved_client_is_served_after_the_fuzzing(
    fuzz_daemon: DaemonProcess,
) -> None:
    async with opened_session(fuzz_daemon) as (client, session):
        result = await client.session_send(session, "ok?")
        with anyio.fail_after(5):
            status = await client.daemon_status()
    assert result.text.endswith("You said: ok?")
    assert fuzz_daemon.process is not None and status.pid == fuzz_daemon.process.pid
