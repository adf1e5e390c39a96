"""The socket protocol: bad input gets a JSON-RPC error, the connection lives on."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from harness import DaemonProcess, InProcessDaemon, opened_session

from rosterd.client import RosterClient, RpcError

pytestmark = pytest.mark.anyio


async def raw(client: RosterClient, data: bytes) -> dict[str, Any]:
    reply: dict[str, Any] = await client.send_raw(data)
    return reply


async def test_socket_is_mode_0660(served: InProcessDaemon) -> None:
    assert stat.S_IMODE(os.stat(served.socket).st_mode) == 0o660


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"{not json", -32700),
        (b'"just a string"', -32600),
        (b'{"jsonrpc":"2.0","id":1}', -32600),
        (b'{"jsonrpc":"1.0","id":1,"method":"daemon.status"}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"no.such"}', -32601),
        (b'{"jsonrpc":"2.0","id":1,"method":"session.open","params":{"worker":"ada"}}', -32602),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"session.open","params":{"worker":1,"channel":"x"}}',
            -32602,
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"session.open",'
            b'"params":{"worker":"../etc","channel":"general"}}',
            -32602,
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"session.open",'
            b'"params":{"worker":"ada","channel":"general","extra":1}}',
            -32602,
        ),
        (b'{"jsonrpc":"2.0","id":1,"method":"task.get","params":{"task":"ada\\n"}}', -32602),
        # A post without its text, or with an empty one, is no message.
        (
            b'{"jsonrpc":"2.0","id":1,"method":"channel.post","params":{"channel":"general","from":"bob"}}',
            -32602,
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"channel.post",'
            b'"params":{"channel":"general","from":"bob","text":""}}',
            -32602,
        ),
        # A wait past any float is out of range; JSON has no inf or nan.
        (
            b'{"jsonrpc":"2.0","id":1,"method":"task.get","params":{"task":"t","wait":1e400}}',
            -32602,
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"runs.show","params":{"run":"s","wait":1e309}}',
            -32602,
        ),
        (b'{"jsonrpc":"2.0","id":1,"method":"task.get","params":{"task":"t","wait":NaN}}', -32700),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"task.get","params":{"task":"t","wait":Infinity}}',
            -32700,
        ),
        (b"\xff\xfe not utf-8", -32700),
    ],
)
async def test_bad_lines_get_errors_and_the_connection_keeps_working(
    served: InProcessDaemon, line: bytes, code: int
) -> None:
    async with await served.client() as client:
        reply = await raw(client, line + b"\n")
        assert reply["jsonrpc"] == "2.0"
        assert reply["error"]["code"] == code
        assert reply["error"]["message"]
        status = await client.daemon_status()
    assert status.sessions == 0


async def test_unknown_worker_and_channel_are_named(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        with pytest.raises(RpcError) as unknown_worker:
            await client.session_open("bob", "general")
        with pytest.raises(RpcError) as unknown_channel:
            await client.session_open("ada", "random")
        with pytest.raises(RpcError) as not_member:
            await client.session_open("grace", "releases")
    assert unknown_worker.value.code == 1003
    assert unknown_worker.value.data == {"kind": "worker", "name": "bob"}
    assert unknown_channel.value.data == {"kind": "channel", "name": "random"}
    assert "not a member of channel 'releases'" in str(not_member.value)


async def test_a_line_over_1_mib_is_refused_and_the_next_line_works(
    served: InProcessDaemon,
) -> None:
    async with await served.client() as client:
        huge = b'{"jsonrpc":"2.0","id":1,"method":"daemon.status","params":{"x":"' + b"a" * (
            1 << 20
        )
        reply = await raw(client, huge + b'"}}\n')
        assert reply["error"]["code"] == -32600
        assert "exceeds" in reply["error"]["message"]
        status = await client.daemon_status()
    assert status.pid > 0


async def test_notifications_get_no_reply_but_take_effect(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        note = {"jsonrpc": "2.0", "method": "memory.add", "params": {"worker": "ada", "text": "n1"}}
        status_call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "memory.list",
            "params": {"worker": "ada"},
        }
        reply = await raw(
            client, msgspec.json.encode(note) + b"\n" + msgspec.json.encode(status_call) + b"\n"
        )
    assert reply["id"] == 7
    assert [item["text"] for item in reply["result"]] == ["n1"]


async def test_one_bad_client_does_not_disturb_another(served: InProcessDaemon) -> None:
    async with opened_session(served) as (good, session), await served.client() as bad:
        for junk in (b"][\n", b"\x00\x01\x02\n", b'{"jsonrpc":"2.0","id":[],"method":"x"}\n'):
            assert "error" in await raw(bad, junk)
        await bad.aclose()
        result = await good.session_send(session, "still fine")
    assert result.turn == 1


async def test_a_client_that_disconnects_mid_turn_does_not_lose_the_turn(
    served: InProcessDaemon,
) -> None:
    async with opened_session(served) as (client, session):
        stream = await anyio.connect_unix(served.socket)
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session.send",
            "params": {"session": session, "text": "bye"},
        }
        await stream.send(msgspec.json.encode(request) + b"\n")
        # Its first delta says the turn is under way: hang up in the middle of it.
        first = await BufferedByteReceiveStream(stream).receive_until(b"\n", 1 << 20)
        assert msgspec.json.decode(first)["method"] == "turn.delta"
        await stream.aclose()
        # A session's turns go in order: this one waits for the cut-off one to commit.
        result = await client.session_send(session, "next")
    assert result.turn == 2


async def test_a_hand_damaged_state_file_is_a_clear_error(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        other = (await client.run_direct("ada", "hello")).run
        run = (await client.run_direct("ada", "hi")).run
        (served.state / "runs" / run / "run.json").write_text('{"id": ')
        with pytest.raises(RpcError) as failure:
            await client.runs_show(run)
        status = await client.daemon_status()
        # It hides only itself: the list goes on without it.
        assert [info.id for info in await client.runs_list()] == [other]
    assert failure.value.code == 1008
    assert failure.value.data == {"op": "decode", "errno": None}
    assert "run.json: unreadable state file" in str(failure.value)
    assert status.pid > 0


async def test_the_deltas_a_reply_makes_together_reach_the_client_in_one_write(
    org_dir: Path, tmp_path: Path
) -> None:
    # A daemon process: in the test's own event loop, the reader would not
    # run between two writes of the daemon's.
    with DaemonProcess(org_dir, tmp_path / "state").start() as daemon:
        async with await anyio.connect_unix(daemon.socket) as stream:
            replies = BufferedByteReceiveStream(stream)

            async def call(method: str, params: dict[str, str]) -> None:
                request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
                await stream.send(msgspec.json.encode(request) + b"\n")

            await call("session.open", {"worker": "ada", "channel": "general"})
            opened = msgspec.json.decode(await replies.receive_until(b"\n", 1 << 20))
            await call("session.send", {"session": opened["result"]["session"], "text": "hello"})
            first = await replies.receive()
            received = first
            while b'"result"' not in received:
                received += await replies.receive()
    deltas = [line for line in received.splitlines() if b'"turn.delta"' in line]
    # The echo engine's reply comes in several deltas, all made at once.
    assert len(deltas) > 1
    assert [line for line in first.splitlines() if b'"turn.delta"' in line] == deltas
