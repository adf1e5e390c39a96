"""Slow and abusive clients: none of them stalls, starves or bloats the daemon."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import anyio
import anyio.to_thread
import msgspec
import pytest
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from harness import DaemonProcess, set_daemon
from orgs import simulated_engine, write_org
from simulator import Reply, Simulator

from rosterd.client import RosterClient
from rosterd.protocol import MemoryList


def started(org: Path, state: Path, daemon: str) -> DaemonProcess:
    """A daemon process of *org* (the example org's copy) on *state*, its
    ``[daemon]`` table given *daemon* (TOML lines)."""
    set_daemon(org, daemon)
    return DaemonProcess(org, state).start()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS line")


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def pid_of(process: DaemonProcess) -> int:
    assert process.process is not None
    return process.process.pid


def request(request_id: int | str, method: str, **params: object) -> bytes:
    line = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return msgspec.json.encode(line) + b"\n"


async def hang_up(stream: SocketStream) -> None:
    """Close our end and wait until the daemon closed its own: by then it has
    let go of the connection, its slot and its descriptor."""
    with anyio.fail_after(10):
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stream.send_eof()
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            while await stream.receive():
                pass  # replies still on their way
    await stream.aclose()


async def read_line(stream: SocketStream) -> dict[str, object]:
    reply: dict[str, object] = msgspec.json.decode(
        await BufferedByteReceiveStream(stream).receive_until(b"\n", 1 << 20)
    )
    return reply


async def chat(client: RosterClient, worker: str, channel: str, turns: int) -> list[str]:
    opened = await client.session_open(worker, channel)
    texts = []
    for n in range(turns):
        result = await client.session_send(opened.session, f"t{n}")
        texts.append(result.text)
    return texts


@pytest.mark.anyio
async def test_a_client_that_never_reads_is_dropped_and_others_carry_on(
    org_dir: Path, tmp_path: Path
) -> None:
    with started(org_dir, tmp_path / "state", "send_timeout_s = 2") as daemon:
        await _never_reading_client(daemon)


async def _never_reading_client(daemon: DaemonProcess) -> None:
    async with await daemon.client() as client:
        # Notes are capped in size, so many of them make the 1 MB reply.
        for n in range(20):
            await client.memory_add("ada", f"{n % 10}" * 50_000)
    rss_before = rss_kib(pid_of(daemon))
    # Eight pipelined 1 MB replies, never read: the daemon's send blocks.
    deaf = await anyio.connect_unix(daemon.socket)
    await deaf.send(b"".join(request(n, "memory.list", worker="ada") for n in range(8)))
    served = 0
    dropped = anyio.Event()

    async def note_the_drop() -> None:
        with anyio.fail_after(40):
            await daemon.logged("it stopped reading")
        dropped.set()

    async with await daemon.client() as good, anyio.create_task_group() as tg:
        opened = await good.session_open("grace", "general")
        tg.start_soon(note_the_drop)
        while not dropped.is_set():
            result = await good.session_send(opened.session, f"turn {served}")
            assert result.text.endswith(f"You said: turn {served}")
            served += 1
            # A steady, light load: a pause after each turn, unless the drop came.
            with anyio.move_on_after(0.05):
                await dropped.wait()
        # The drop closed the connection: what was buffered, then end of stream.
        received = 0
        with anyio.fail_after(10):
            try:
                while True:
                    received += len(await deaf.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
        await deaf.aclose()
        status = await good.daemon_status()
    rss_after = rss_kib(pid_of(daemon))
    print(
        f"\nnever-reading client: {served} turns served to another client while it was stuck; "
        f"it got {received} of 8 MB; RSS {rss_before} -> {rss_after} KiB"
    )
    assert served >= 10
    assert 0 < received < 2 * 1_000_000
    assert status.sessions == 1
    assert rss_after - rss_before < 32 * 1024


@pytest.mark.anyio
async def test_a_line_sent_byte_by_byte_blocks_nobody(daemon: DaemonProcess) -> None:
    line = request("slow", "memory.add", worker="ada", text="dribbled in slowly")
    others_done = anyio.Event()
    slow_finished_sending_first = False
    reply: dict[str, object] = {}

    async def dribble() -> None:
        nonlocal slow_finished_sending_first
        async with await anyio.connect_unix(daemon.socket) as slow:
            for byte in line:  # ~3 s for the whole line
                await slow.send(bytes([byte]))
                await anyio.sleep(3 / len(line))
            slow_finished_sending_first = not others_done.is_set()
            reply.update(await read_line(slow))

    async with anyio.create_task_group() as tg:
        tg.start_soon(dribble)
        async with await daemon.client() as other:
            texts = await chat(other, "ada", "general", 20)
            memory = await other.memory_list("ada")
        others_done.set()
    assert not slow_finished_sending_first
    assert texts[-1].endswith("You said: t19")
    assert memory == []  # nothing half-received was acted on
    assert reply["id"] == "slow"
    assert reply["result"]["text"] == "dribbled in slowly"  # type: ignore[index]


@pytest.mark.anyio
async def test_a_half_sent_line_does_not_hold_up_sigterm(daemon: DaemonProcess) -> None:
    stream = await anyio.connect_unix(daemon.socket)
    await stream.send(request(1, "daemon.status")[:20])
    async with await daemon.client() as client:  # the partial line is being waited on
        await client.daemon_status()
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGTERM)
    code = await anyio.to_thread.run_sync(daemon.process.wait, 10)
    await stream.aclose()
    assert code == 0


@pytest.mark.anyio
async def test_500_idle_connections_do_not_starve_a_working_client(
    daemon: DaemonProcess,
) -> None:
    pid = pid_of(daemon)
    async with await daemon.client() as warmup:
        await chat(warmup, "grace", "general", 2)
    rss_before, fds_before = rss_kib(pid), open_fds(pid)
    idle: list[SocketStream] = []
    try:
        for n in range(500):
            stream = await anyio.connect_unix(daemon.socket)
            idle.append(stream)
            if n % 2:  # half of them also leave a partial line behind
                await stream.send(b'{"jsonrpc":"2.0","id":1,"met')
        async with await daemon.client() as worker:
            texts = await chat(worker, "ada", "general", 20)
            fds_busy = open_fds(pid)
            rss_busy = rss_kib(pid)
    finally:
        for held in idle:
            await hang_up(held)
    assert texts[-1].endswith("You said: t19")
    assert fds_busy >= fds_before + 500  # they really were all accepted and held
    # Each hang-up was answered by the daemon closing its end: its descriptors are gone.
    assert open_fds(pid) <= fds_before + 5
    async with await daemon.client() as client:
        await client.daemon_status()
    rss_after = rss_kib(pid)
    print(
        f"\n500 idle connections: fds {fds_before} -> {fds_busy} -> {open_fds(pid)}; "
        f"RSS {rss_before} -> {rss_busy} -> {rss_after} KiB"
    )
    assert rss_busy - rss_before < 64 * 1024


@pytest.mark.anyio
async def test_connections_over_max_connections_get_an_error_and_are_closed(
    org_dir: Path, tmp_path: Path
) -> None:
    with started(org_dir, tmp_path / "state", "max_connections = 3") as process:
        # The daemon's own uid may take 8 reserved slots beyond max_connections.
        clients = [await process.client() for _ in range(3 + 8 - 1)]
        freed = await anyio.connect_unix(process.socket)  # the slot given back below
        await freed.send(request(0, "daemon.status"))
        assert "result" in await read_line(freed)
        for client in clients:
            await client.daemon_status()  # each one is registered, not just queued
        async with await anyio.connect_unix(process.socket) as extra:
            # The daemon may refuse and close before the line is sent: then it never lands.
            with contextlib.suppress(anyio.BrokenResourceError):
                await extra.send(request(1, "memory.add", worker="ada", text="must not land"))
            refusal = await read_line(extra)
            with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                await extra.receive()
        await hang_up(freed)  # the daemon closed its end: the slot is free again
        async with await process.client() as again:
            memory = await again.request(MemoryList("ada"))
        for client in clients:
            assert (await client.daemon_status()).pid == pid_of(process)
            await client.aclose()
    assert refusal["id"] is None
    assert refusal["error"]["code"] == 1007  # type: ignore[index]
    assert "too many connections" in refusal["error"]["message"]  # type: ignore[index]
    assert memory == []


@pytest.mark.anyio
async def test_running_out_of_descriptors_backs_off_and_keeps_serving(
    daemon: DaemonProcess,
) -> None:
    pid = pid_of(daemon)
    await anyio.run_process(["prlimit", f"--pid={pid}", "--nofile=64:64"])
    hogs = [await anyio.connect_unix(daemon.socket) for _ in range(80)]
    try:
        # What `systemctl status` would show: accepting stopped, for want of descriptors.
        await anyio.to_thread.run_sync(daemon.wait_notified, b"STATUS=accept failed")
    finally:
        for hog in hogs:
            await hog.aclose()
    with anyio.fail_after(20):
        async with await daemon.client() as client:
            status = await client.daemon_status()
    assert daemon.process is not None and daemon.process.poll() is None
    assert status.sessions == 0


@pytest.mark.anyio
async def test_max_connections_is_fitted_to_the_open_file_limit(
    org_dir: Path, tmp_path: Path
) -> None:
    daemon = _LowFdLimitDaemon(org_dir, tmp_path / "state").start()
    try:
        assert "max_connections 1024 lowered to 136" in daemon.log()
        async with await daemon.client() as client:
            assert (await client.daemon_status()).sessions == 0
    finally:
        daemon.stop()


class _LowFdLimitDaemon(DaemonProcess):
    def command(self) -> list[str]:
        return ["prlimit", "--nofile=200:200", *super().command()]


@pytest.mark.anyio
async def test_idle_connections_cannot_lock_out_status(org_dir: Path, tmp_path: Path) -> None:
    daemon = started(org_dir, tmp_path / "state", "max_connections = 8")
    # Eight idle connections fill max_connections; the owner's reserved slots remain.
    hogs = [await anyio.connect_unix(daemon.socket) for _ in range(8)]
    try:
        with anyio.fail_after(20):
            async with await daemon.client() as client:
                assert (await client.daemon_status()).sessions == 0
            # Past the reserve, a new connection is told why, then closed.
            while True:
                extra = await anyio.connect_unix(daemon.socket)
                hogs.append(extra)
                # A refused connection may be closed before the line is sent.
                with contextlib.suppress(anyio.BrokenResourceError):
                    await extra.send(request(1, "daemon.status"))
                reply = await read_line(extra)
                if "error" in reply:
                    break
        assert reply["error"]["code"] == 1007  # type: ignore[index]
        assert len(hogs) <= 8 + 8 + 1
    finally:
        for hog in hogs:
            await hog.aclose()
        daemon.stop()


@pytest.mark.anyio
async def test_a_connection_that_sends_no_line_is_closed(org_dir: Path, tmp_path: Path) -> None:
    with started(org_dir, tmp_path / "state", "idle_timeout_s = 1") as daemon:
        idle = await anyio.connect_unix(daemon.socket)
        await idle.send(b'{"jsonrpc":"2.0"')  # never finished
        with anyio.fail_after(10), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await idle.receive()
        await idle.aclose()
        assert "idle" in daemon.log()


@pytest.mark.anyio
async def test_a_client_that_never_reads_a_long_stream_is_dropped_and_the_turn_recorded(
    tmp_path: Path,
) -> None:
    # Far more deltas than the daemon queues for a client (256 KiB) and the
    # socket holds: the turn outlives the client that asked for it.
    long = "".join(f"line {n:07d} of a long answer\n" for n in range(40_000))
    async with Simulator(delta_chars=1024) as sim:
        sim.script(Reply(long))
        org = write_org(
            tmp_path / "org",
            engine=simulated_engine(sim),
            sections="[daemon]\nsend_timeout_s = 2\n",
        )
        with DaemonProcess(org, tmp_path / "state").start() as daemon:
            async with await daemon.client() as client:
                session = (await client.session_open("w0", "c0")).session
            deaf = await anyio.connect_unix(daemon.socket)
            await deaf.send(request(1, "session.send", session=session, text="tell me all"))
            with anyio.fail_after(60):
                await daemon.logged("it stopped reading")
            async with await daemon.client() as client:
                # Waits for the session's turn under way, then answers after it.
                after = await client.session_send(session, "and now?")
                shown = await client.runs_show(session)
            await deaf.aclose()
    replies = [e.content for e in shown.transcript if e.role == "assistant"]
    assert replies == [long]
    # The next turn is answered, by a new session: the reply filled this one.
    assert after.rolled_from == session and after.text.startswith("Reply")
