"""A session turn's floor on this machine: the least any daemon must do for it.

One repetition of the floor, in the bench's own process, is four parts, each
timed on its own:

- compile: ``compile_turn`` of the turn's fresh input (the text, the
  worker's memory and briefing views, what the conversation already shows,
  its recent messages) against the session's system part, compiled once
  with ``compile_system`` as a session does at its start;
- encode: the records the file store writes for the turn, encoded with one
  msgspec call: the trace record, the user and assistant transcript entries
  and the two channel messages (the assistant entry is the daemon's own, as
  read back from its transcript, so that its usage and cache verdict weigh
  what they weigh there);
- append + fsync: those bytes written to one file and fsynced once;
- socket: one round trip over a Unix socket (a socketpair, answered by a
  thread of this process) of the daemon's request and reply sizes, the reply
  being every byte the daemon sends for a turn (its deltas and the result).

Beside the floor, not part of it, each repetition also times the disk waits
the contract asks of a turn as the file store makes them: the trace and the
user turn before the engine sees a byte, then the reply and the channel
posts before the client hears of it, each wait a write and an fsync of two
files at once (the second file in another thread, as the store's writers
do). The daemon cannot wait for the disk less than that; how far the floor's
one fsync is below it is the share of the gap that the on-disk layout sets,
not the daemon's machinery.

The floor is the sum of the four parts' p50s, not the p50 of their sums: it
is what each part typically costs here, so that the tail of one part (an
fsync that waited behind another process's writes) is not added to the
others of the same repetition. The daemon's turn is timed by its client, so
it includes the client's own work; the floor's socket part is a plain send
and receive on each end, with nothing encoded or decoded.

``beside`` runs the floor next to a session on a real daemon: each of the
session's turns (after the first few, the first carrying the channel's
history) alternates with one repetition of the floor for the same turn,
the order swapped every turn, so that machine noise hits both alike. The
turn p50 it returns is that session's, not the load table's one-session
row, which ran earlier, alone.
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream

from rosterd.client import RosterClient
from rosterd.compiler import (
    CONTEXT_MESSAGES,
    ChannelMessage,
    GateIndex,
    MemoryIndex,
    RunMeta,
    ShownItems,
    SystemPrompt,
    TurnInput,
    check_prefix,
    compile_system,
    compile_turn,
    message_texts,
    prefix_state,
)
from rosterd.org import Surface, load_org
from rosterd.protocol import SessionSend, TranscriptEntry, TurnResult, decode_reply, encode_request

__all__ = (
    "PARTS",
    "WAITS",
    "Beside",
    "Floor",
    "ProbedTurn",
    "beside",
    "probe_turn",
    "session_system",
)

PARTS = ("compile", "encode", "append+fsync", "socket")
# The disk waits of a turn, timed beside the floor (see the module's docstring).
WAITS = "two waits, two files each"


class ProbedTurn(msgspec.Struct, frozen=True):
    """One turn sent over a raw connection: the bytes each way, and its result."""

    request: bytes
    reply: bytes
    result: TurnResult


async def probe_turn(socket_path: Path, session: str, text: str) -> ProbedTurn:
    """Send one ``session.send`` and count every byte the daemon answers with."""
    request = encode_request(1, SessionSend(session, text=text, sender="operator"))
    received = bytearray()
    async with await anyio.connect_unix(socket_path) as stream:
        await stream.send(request)
        reader = BufferedByteReceiveStream(stream)
        while True:
            line = await reader.receive_until(b"\n", 16 << 20)
            received += line + b"\n"
            reply = decode_reply(line)
            if reply.id == 1:
                result = msgspec.json.decode(reply.result, type=TurnResult)
                return ProbedTurn(request=request, reply=bytes(received), result=result)


def session_system(org_dir: Path, worker: str, channel: str, run: str) -> SystemPrompt:
    """The system part a session of *worker* in *channel* compiles at its start."""
    org = load_org(org_dir)
    scope = org.scope(Surface.SESSION, worker, channel)
    return compile_system(org, scope, RunMeta(run=run, turn=0, now=time.time()))


def _answer(server: socket.socket, reply: bytes) -> None:
    """Answer every request line on *server* with *reply*, until EOF."""
    with server:
        pending = b""
        while True:
            data = server.recv(65536)
            if not data:
                return
            pending += data
            if pending.endswith(b"\n"):
                pending = b""
                server.sendall(reply)


class Floor:
    """The floor's repetitions, over one session's turns; a file and a socketpair.

    Use as a context manager; ``repeat(n)`` runs one repetition of turn *n*
    and keeps each part's time in ``times``.
    """

    def __init__(
        self,
        system: SystemPrompt,
        run: str,
        path: Path,
        probed: ProbedTurn,
        assistant: TranscriptEntry,
    ) -> None:
        scope = system.scope
        assert scope.channel is not None
        self.system = system
        self.run = run
        self.channel = scope.channel
        self.worker = scope.worker
        # An empty worker's views, as the stores hand them over.
        self.memory = MemoryIndex(()).snapshot()
        self.gates = GateIndex(scope.worker).snapshot()
        self.shown = ShownItems(memory={}, gates={})
        # A session's later turns check the prefix against its own.
        self.checks = check_prefix(prefix_state(system, run, time.time()), system)
        self.assistant = assistant
        self.reply_text = probed.result.text
        self.request = probed.request
        self.reply_size = len(probed.reply)
        self.records_size = 0
        self.times: dict[str, list[float]] = {part: [] for part in PARTS}
        self._recent: list[str] = []
        self._encoder = msgspec.json.Encoder()
        self._buffer = bytearray(self.reply_size)
        self._fd = _append_only(path)
        # The files of the contract's two waits: the trace's and the
        # transcript's, then the transcript's and the channel log's.
        self._logs = [_append_only(path.with_suffix(f".{n}.jsonl")) for n in range(3)]
        self._aside = ThreadPoolExecutor(max_workers=1)
        self.waits: list[float] = []
        self._client, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._answerer = threading.Thread(target=_answer, args=(server, probed.reply), daemon=True)
        self._answerer.start()

    def __repr__(self) -> str:
        return f"Floor({self.run!r}, {len(self.times['compile'])} repetitions)"

    def __enter__(self) -> Floor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client.close()
        self._answerer.join()
        self._aside.shutdown()
        for fd in (self._fd, *self._logs):
            os.close(fd)

    def repeat(self, n: int) -> None:
        """One repetition of the floor for turn *n* of the session."""
        now = time.time()
        turn = TurnInput(
            text=f"turn {n}",
            memory=self.memory,
            gates=self.gates,
            shown=self.shown,
            recent=tuple(self._recent[-CONTEXT_MESSAGES:]),
        )
        start = time.perf_counter()
        compilation = compile_turn(self.system, turn, RunMeta(run=self.run, turn=n, now=now))
        compiled = time.perf_counter()
        records = (
            msgspec.structs.replace(compilation.record, cache=self.checks),
            TranscriptEntry(
                turn=n, role="user", content=compilation.input_text, at=now, seen=2 * n
            ),
            msgspec.structs.replace(self.assistant, turn=n, content=self.reply_text, at=now),
            ChannelMessage(seq=2 * n + 1, sender="operator", text=turn.text, at=now, run=self.run),
            ChannelMessage(
                seq=2 * n + 2, sender=self.worker, text=self.reply_text, at=now, run=self.run
            ),
        )
        built = time.perf_counter()
        data = self._encoder.encode_lines(records)
        encoded = time.perf_counter()
        _write_and_sync(self._fd, data)
        synced = time.perf_counter()
        self._client.sendall(self.request)
        got, buffer = 0, memoryview(self._buffer)
        while got < self.reply_size:
            got += self._client.recv_into(buffer[got:])
        answered = time.perf_counter()
        self._recent.extend(message_texts(compilation.input_text))
        self.records_size = len(data)
        self.waits.append(self._contract_waits(records))
        for part, elapsed in zip(
            PARTS,
            (compiled - start, encoded - built, synced - encoded, answered - synced),
            strict=True,
        ):
            self.times[part].append(elapsed)

    def _contract_waits(self, records: tuple[msgspec.Struct, ...]) -> float:
        """The seconds of a turn's two disk waits, as the file store makes them."""
        trace, user, reply, first_post, second_post = (
            self._encoder.encode(record) + b"\n" for record in records
        )
        context, transcript, channel = self._logs
        start = time.perf_counter()
        for (fd, data), (other_fd, other_data) in (
            ((context, trace), (transcript, user)),
            ((transcript, reply), (channel, first_post + second_post)),
        ):
            other = self._aside.submit(_write_and_sync, other_fd, other_data)
            _write_and_sync(fd, data)
            other.result()
        return time.perf_counter() - start


def _append_only(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _write_and_sync(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


class Beside(msgspec.Struct, frozen=True):
    """The floor and the daemon's turns it alternated with."""

    floor: dict[str, list[float]]
    turns: list[float]
    # The contract's disk waits of each repetition (``WAITS``).
    waits: list[float]
    # Bytes of a turn: the floor's records, the daemon's appends to its logs.
    floor_bytes: int
    daemon_bytes: float
    request_bytes: int
    reply_bytes: int

    def p50s(self) -> dict[str, float]:
        return {part: statistics.median(times) for part, times in self.floor.items()}

    def floor_p50(self) -> float:
        """The floor: the sum of its parts' p50s (see the module's docstring)."""
        return sum(self.p50s().values())

    def waits_p50(self) -> float:
        return statistics.median(self.waits)

    def with_waits_p50(self) -> float:
        """The floor with the contract's disk waits for its one fsync."""
        return self.floor_p50() - self.p50s()["append+fsync"] + self.waits_p50()


async def beside(root: Path, socket_path: Path, worker: str, channel: str, turns: int) -> Beside:
    """One session of *worker* in *channel* on the daemon serving ``root/org``
    and ``root/state`` on *socket_path*: its turns timed by the client, each
    alternating with one repetition of the floor (the order swapped every
    turn), so that machine noise hits both alike."""
    state = root / "state"
    async with await RosterClient.connect(socket_path) as client:
        opened = await client.session_open(worker, channel)
        session = opened.session
        # The first turn carries the channel's history: not a later turn's floor.
        for n in range(1, 4):
            await client.session_send(session, f"turn {n}")
        probed = await probe_turn(socket_path, session, "turn 4")
        run = state / "runs" / probed.result.run
        last = (run / "transcript.jsonl").read_bytes().splitlines()[-1]
        assistant = msgspec.json.decode(last, type=TranscriptEntry)
        assert assistant.role == "assistant", assistant
        system = session_system(root / "org", worker, channel, session)
        assert len(system.text) == opened.system_chars, "not the daemon's system part"
        logs = [
            run / "context.jsonl",
            run / "transcript.jsonl",
            state / "channels" / f"{channel}.jsonl",
        ]
        before = sum(log.stat().st_size for log in logs)
        latencies: list[float] = []
        with Floor(system, session, root / "floor.jsonl", probed, assistant) as floor:
            for n in range(5, 8):  # warm up
                floor.repeat(n)
            floor.times = {part: [] for part in PARTS}
            floor.waits = []
            for n in range(5, 5 + turns):
                if n % 2:
                    floor.repeat(n)
                start = time.perf_counter()
                await client.session_send(session, f"turn {n}")
                latencies.append(time.perf_counter() - start)
                if not n % 2:
                    floor.repeat(n)
        after = sum(log.stat().st_size for log in logs)
    return Beside(
        floor=floor.times,
        turns=latencies,
        waits=floor.waits,
        floor_bytes=floor.records_size,
        daemon_bytes=(after - before) / turns,
        request_bytes=len(probed.request),
        reply_bytes=len(probed.reply),
    )
