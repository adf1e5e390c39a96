"""The typed client: ``request`` takes any declared method's params and
returns its declared result; the named shorthands return the protocol's
Structs; against a daemon on the example org (echo engine)."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
import pytest
from harness import InProcessDaemon

from rosterd import ProtocolError, RosterError
from rosterd.client import RosterClient, RpcError
from rosterd.compiler import ChannelMessage, MemoryItem
from rosterd.daemon import HANDLED
from rosterd.protocol import (
    INVALID_PARAMS,
    METHODS,
    NOT_FOUND,
    SESSION_ERROR,
    Closed,
    ContextPage,
    DaemonStatus,
    Delta,
    GateState,
    MemoryAdd,
    MemoryList,
    MemoryNote,
    RunDirect,
    RunInfo,
    RunShown,
    SessionOpened,
    StatusResult,
    TaskList,
    TaskState,
    TurnResult,
)

pytestmark = pytest.mark.anyio


def test_every_declared_method_has_one_handler_in_the_daemon() -> None:
    assert set(HANDLED) == set(METHODS.values())
    assert all(kind.method == name for name, kind in METHODS.items())


async def test_request_returns_each_method_s_declared_result(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        status = await client.request(DaemonStatus())
        assert isinstance(status, StatusResult)
        note = await client.request(MemoryAdd("ada", "the build is green"))
        assert isinstance(note, MemoryNote) and note.id == "m-1"
        notes = await client.request(MemoryList("ada"))
        assert notes == [note]
        assert await client.request(TaskList()) == []
        deltas: list[Delta] = []

        async def on_delta(delta: Delta) -> None:
            deltas.append(delta)

        turn = await client.request(RunDirect("grace", text="hello"), on_delta)
        assert isinstance(turn, TurnResult) and "".join(d.text for d in deltas) == turn.text


async def test_a_session_from_open_to_close(served: InProcessDaemon) -> None:
    deltas: list[Delta] = []

    async def on_delta(delta: Delta) -> None:
        deltas.append(delta)

    async with await served.client() as client:
        status = await client.daemon_status()
        assert isinstance(status, StatusResult) and status.config_generation == 1
        opened = await client.session_open("ada", "general")
        assert isinstance(opened, SessionOpened) and opened.turns == 0
        turn = await client.session_send(opened.session, "is 1.4 green?", "bob", on_delta)
        assert isinstance(turn, TurnResult)
        assert (turn.run, turn.turn) == (opened.session, 1)
        assert "You said: is 1.4 green?" in turn.text
        assert "".join(d.text for d in deltas) == turn.text
        assert {d.run for d in deltas} == {opened.session}
        assert "message" in [b.block for b in turn.blocks]

        shown = await client.runs_show(opened.session)
        assert isinstance(shown, RunShown) and shown.info.worker == "ada"
        assert [e.role for e in shown.transcript] == ["user", "assistant"]
        assert [r.kind for r in shown.records] == ["system", "turn"]
        page = await client.runs_context(opened.session)
        assert isinstance(page, ContextPage)
        assert [m.role for m in page.turns[0].messages] == ["user"]
        every = await client.runs_context(opened.session, all=True, limit=1)
        assert [r.turn for r in every.turns] == [1] and every.next is None
        runs = await client.runs_list()
        assert [r.id for r in runs] == [opened.session] and isinstance(runs[0], RunInfo)

        assert await client.session_close(opened.session) == Closed(closed=opened.session)
        with pytest.raises(RpcError) as ended:
            await client.session_send(opened.session, "still there?")
        assert ended.value.code == SESSION_ERROR


async def test_direct_runs_tasks_memory_gates_and_channels(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        direct = await client.run_direct("grace", "hello")
        assert isinstance(direct, TurnResult) and direct.run.startswith("d-")

        task = await client.task_submit("ada", "general", "write the notes")
        assert isinstance(task, TaskState) and task.worker == "ada"
        assert (await client.task_get(task.id)).id == task.id
        assert [t.id for t in await client.task_list()] == [task.id]

        note = await client.memory_add("ada", "the build is green", channel="general")
        assert isinstance(note, MemoryItem) and note.channel == "general"
        assert await client.memory_list("ada") == [note]

        gate = await client.gate_file("ada", "ship 1.4?")
        assert isinstance(gate, GateState) and gate.status == "open" and gate.channel is None
        resolved = await client.gate_resolve(gate.id, "yes", note="go")
        assert (resolved.status, resolved.outcome, resolved.note) == ("resolved", "yes", "go")
        assert await client.gate_list(worker="grace") == []
        assert [g.id for g in await client.gate_list()] == [gate.id]

        posted = await client.channel_post("general", "alice", "lunch at noon")
        assert isinstance(posted, ChannelMessage) and posted.sender == "alice"

        with pytest.raises(RpcError) as unknown:
            await client.runs_show("s-nothing")
        assert unknown.value.code == NOT_FOUND


@pytest.mark.parametrize("wait", [math.inf, math.nan, -1.0, 601.0])
async def test_params_the_daemon_would_refuse_are_refused_before_sending(
    served: InProcessDaemon, wait: float
) -> None:
    """JSON has no inf or nan: sent, they would arrive as null, a task.get
    that does not wait at all."""
    async with await served.client() as client:
        task = await client.task_submit("ada", "general", "write the notes")
        with pytest.raises(RpcError) as refused:
            await client.task_get(task.id, wait=wait)
        assert refused.value.code == INVALID_PARAMS
        assert "wait" in str(refused.value)
        # The connection is as good as before.
        assert (await client.task_get(task.id)).id == task.id


async def test_a_notification_the_method_does_not_declare_is_a_broken_reply(
    tmp_path: Path,
) -> None:
    # A peer that bends the protocol: a turn's delta in reply to daemon.status.
    path = tmp_path / "bent.sock"
    listener = await anyio.create_unix_listener(path)

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            request = msgspec.json.decode(await stream.receive())
            notification = {"jsonrpc": "2.0", "method": "turn.delta", "params": {"text": "x"}}
            result = {"jsonrpc": "2.0", "id": request["id"], "result": {}}
            await stream.send(msgspec.json.encode(notification) + b"\n")
            await stream.send(msgspec.json.encode(result) + b"\n")

    async with anyio.create_task_group() as tg, listener:
        tg.start_soon(listener.serve, serve)
        async with await RosterClient.connect(path) as client:
            with pytest.raises(ProtocolError, match=r"daemon\.status sends no 'turn\.delta'"):
                await client.request(DaemonStatus())
        tg.cancel_scope.cancel()


async def test_a_call_given_up_midway_does_not_answer_the_next_one(
    served: InProcessDaemon,
) -> None:
    async with await served.client() as client:
        session = (await client.session_open("ada", "general")).session
        with anyio.CancelScope() as scope:

            async def give_up(delta: Delta) -> None:
                # A frontend whose user pressed Ctrl-C while the reply streams.
                scope.cancel()
                await anyio.lowlevel.checkpoint()

            await client.session_send(session, "first", on_delta=give_up)
        assert scope.cancelled_caught
        # What the daemon still sends for the call given up is read past,
        # never taken for the next call's reply.
        status = await client.daemon_status()
        assert isinstance(status, StatusResult)
        assert status.sessions == 1
        again = await client.session_send(session, "second")
        assert (again.run, again.turn) == (session, 2)
        assert "second" in again.text


async def test_a_reply_line_over_the_client_s_limit_is_a_broken_reply(tmp_path: Path) -> None:
    # A peer whose reply never ends within the 16 MiB a reply line may take.
    path = tmp_path / "long.sock"
    listener = await anyio.create_unix_listener(path)

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.receive()
            with contextlib.suppress(anyio.BrokenResourceError, anyio.EndOfStream):
                await stream.send(b'{"jsonrpc":"2.0","id":1,"result":"' + b"x" * (17 << 20))
                await stream.send(b'"}\n')
                await stream.receive()

    async with anyio.create_task_group() as tg, listener:
        tg.start_soon(listener.serve, serve)
        async with await RosterClient.connect(path) as client:
            with pytest.raises(ProtocolError, match="longer than"):
                await client.request(DaemonStatus())
            # The rest of that line is never read as the next reply.
            with pytest.raises(RosterError, match="closed"):
                await client.request(DaemonStatus())
        tg.cancel_scope.cancel()
