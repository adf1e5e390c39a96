"""The cache benchmark's workload, driven through a real daemon over its socket.

Workers x channels sessions, turn after turn; between turns memory notes
are added, gates filed and resolved two turns later, a task runs on turns
5, 15, 25..., and halfway one worker's identity is edited and its sessions
reopened. What
each turn sent is read back from the daemon (``runs.context``), so the
naive strategies can be replayed on exactly the same conversation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec
from simulator import filler

from rosterd.client import RosterClient, RpcError
from rosterd.compiler import ContextRecord
from rosterd.protocol import ChatMessage, Usage

__all__ = ("Recording", "Shape", "Turn", "run_workload")

# Messages posted to each channel before the sessions open: their first
# turn's history.
HISTORY = 5


@dataclass(frozen=True)
class Shape:
    workers: int
    channels: int
    turns: int


@dataclass
class Turn:
    """One session turn as a user sent it, and what came back."""

    worker: str
    channel: str
    number: int  # the workload's turn number, the same for every session
    text: str
    memory: tuple[str, ...]  # the worker's notes at that moment, for naive (a)
    run: str = ""
    turn: int = 0  # the turn number within its run
    reply: str = ""
    usage: Usage | None = None
    failed: bool = False
    # How many provider requests had been made before this turn, when the
    # caller can count them (the simulator): it finds the turn's own request.
    before: int | None = None


class Request(msgspec.Struct, frozen=True):
    turn: int
    system: str
    messages: list[ChatMessage]


class _Page(msgspec.Struct, frozen=True):
    turns: list[Request]
    next: int | None = None


class _Shown(msgspec.Struct, frozen=True):
    records: list[ContextRecord]


@dataclass
class Recording:
    """Every session turn in the order sent, and per run its system record
    and requests (by turn number within the run)."""

    turns: list[Turn] = field(default_factory=list)
    systems: dict[str, ContextRecord] = field(default_factory=dict)
    requests: dict[str, dict[int, Request]] = field(default_factory=dict)

    def request(self, turn: Turn) -> Request:
        return self.requests[turn.run][turn.turn]


class _Driver:
    def __init__(
        self,
        client: RosterClient,
        org: Path,
        shape: Shape,
        carry: bool,
        counter: Callable[[], int] | None,
    ) -> None:
        self.client = client
        self.org = org
        self.shape = shape
        self.carry = carry
        self.counter = counter
        self.workers = [f"w{i}" for i in range(shape.workers)]
        self.channels = [f"c{i}" for i in range(shape.channels)]
        self.sessions: dict[tuple[str, str], str] = {}
        self.memory: dict[str, list[str]] = {w: [] for w in self.workers}
        self.gates: list[tuple[int, str]] = []
        self.recording = Recording()

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        return await self.client.call(method, params)

    async def open(self, worker: str, channel: str) -> None:
        opened = await self.call("session.open", {"worker": worker, "channel": channel})
        self.sessions[worker, channel] = opened["session"]

    async def run(self) -> Recording:
        for channel in self.channels:
            for i in range(HISTORY):
                note = {"channel": channel, "from": "bob", "text": f"earlier note {i}"}
                await self.call("channel.post", note)
        for worker in self.workers:
            for channel in self.channels:
                await self.open(worker, channel)
        for number in range(1, self.shape.turns + 1):
            if self.carry:
                await self.advance(number)
            if number == self.shape.turns // 2 + 1:
                await self.edit_identity(self.workers[-1])
            if number % 10 == 5:
                await self.task(number)
            for (worker, channel), session in self.sessions.items():
                await self.send(worker, channel, session, number)
        for run in {t.run for t in self.recording.turns if t.run}:
            await self.read_back(run)
        return self.recording

    async def advance(self, number: int) -> None:
        """Memory and gates as in a busy org: notes every third turn, a gate
        every fifth, each gate resolved two turns after it was filed."""
        for w, worker in enumerate(self.workers):
            if number % 3 == 0:
                scoped = self.channels[(number // 3 + w) % len(self.channels)]
                text = filler(f"memory {worker} {number}", 180).strip()
                channel = scoped if number % 2 else None
                await self.call("memory.add", {"worker": worker, "text": text, "channel": channel})
                self.memory[worker].append(text)
            if number % 5 == 1:
                gate = await self.call(
                    "gate.file",
                    {
                        "worker": worker,
                        "summary": f"approve step {number} of the rollout for {worker}",
                        "channel": self.channels[number % len(self.channels)],
                    },
                )
                self.gates.append((number, gate["id"]))
        due = [gate for filed, gate in self.gates if filed <= number - 2]
        self.gates = [(filed, gate) for filed, gate in self.gates if filed > number - 2]
        for gate in due:
            await self.call("gate.resolve", {"gate": gate, "outcome": "approved"})

    async def edit_identity(self, worker: str) -> None:
        """An edited identity applies to new sessions: close the worker's and reopen.

        The new rule goes at the top, so no cache can reuse any of the old
        system part (further down, a token-granular cache could reuse what
        precedes it, which Anthropic's block-granular one cannot).
        """
        identity = self.org / "workers" / worker / "identity.md"
        identity.write_text("Always name the gate you wait on.\n" + identity.read_text())
        for (owner, channel), session in list(self.sessions.items()):
            if owner == worker:
                await self.call("session.close", {"session": session})
                await self.open(worker, channel)

    async def task(self, number: int) -> None:
        """A queued task for the first worker, waited for so the order is fixed."""
        worker, channel = self.workers[0], self.channels[0]
        params = {"worker": worker, "channel": channel, "text": f"summarise turn {number}"}
        task = await self.call("task.submit", params)
        with anyio.fail_after(600):
            while task["status"] in ("queued", "running"):
                await anyio.sleep(0.02)
                task = await self.call("task.get", {"task": task["id"]})

    async def send(self, worker: str, channel: str, session: str, number: int) -> None:
        text = f"turn {number}: what is next for {channel}?"
        turn = Turn(worker, channel, number, text, tuple(self.memory[worker]))
        turn.before = self.counter() if self.counter is not None else None
        try:
            result = await self.call(
                "session.send", {"session": session, "text": text, "from": "alice"}
            )
        except RpcError:
            turn.failed = True
        else:
            turn.run, turn.turn, turn.reply = result["run"], result["turn"], result["text"]
            usage = result["usage"]
            turn.usage = None if usage is None else msgspec.convert(usage, Usage)
            # A rollover answers in a new session: later turns go there.
            self.sessions[worker, channel] = result["run"]
        self.recording.turns.append(turn)

    async def read_back(self, run: str) -> None:
        shown = msgspec.convert(await self.call("runs.show", {"run": run}), _Shown)
        self.recording.systems[run] = next(r for r in shown.records if r.kind == "system")
        requests: dict[int, Request] = {}
        after: int | None = 0
        while after is not None:
            params = {"run": run, "all": True, "after": after}
            page = msgspec.convert(await self.call("runs.context", params), _Page)
            requests.update((r.turn, r) for r in page.turns)
            after = page.next
        self.recording.requests[run] = requests


async def run_workload(
    socket: Path,
    org: Path,
    shape: Shape,
    *,
    carry: bool = True,
    counter: Callable[[], int] | None = None,
) -> Recording:
    """Drive *shape* through the daemon on *socket*, whose org is *org*.

    Without *carry* no memory is added and no gate filed: the message-only
    floor. *counter* tells how many provider requests were made so far.
    """
    async with await RosterClient.connect(socket) as client:
        return await _Driver(client, org, shape, carry, counter).run()
