"""Gates: questions a worker waits on, filed and resolved by people."""

from __future__ import annotations

from pathlib import Path

import msgspec

from ..._errors import ConflictError, NotFoundError
from ...compiler import GateIndex, GateView
from ...protocol import GateState
from ._jsonl import StateTable

__all__ = ("FileGates",)


class FileGates:
    """All gates in ``gates.jsonl``; open ones feed the next briefing."""

    def __init__(self, table: StateTable[GateState]) -> None:
        self._table = table
        # Every turn reads the open gates it can show and those resolved
        # since the session's last turn: indexes keep that independent of
        # how many gates were ever filed.
        gates = self._sorted()
        self._open: dict[str, GateIndex] = {}
        self._waiting: dict[str, int] = {}  # open gates per run
        for gate in gates:
            if gate.status == "open":
                self._opened(gate)
        self._resolved = sorted(
            (g for g in gates if g.resolved_at is not None), key=lambda g: g.resolved_at or 0.0
        )

    def __repr__(self) -> str:
        return f"FileGates({len(self._table)} gates)"

    @classmethod
    async def open(cls, path: Path) -> FileGates:
        return cls(await StateTable.open(path, GateState))

    async def file(
        self, worker: str, summary: str, at: float, channel: str | None, run: str | None
    ) -> GateState:
        gate = GateState(
            id=self._table.new_id("g"),
            worker=worker,
            summary=summary,
            filed_at=at,
            channel=channel,
            run=run,
        )
        await self._table.put(gate)
        self._opened(gate)
        return gate

    async def resolve(self, gate_id: str, outcome: str, note: str, at: float) -> GateState:
        gate = await self.get(gate_id)
        if gate.status != "open":
            raise ConflictError(f"gate {gate_id!r} is already resolved ({gate.outcome})")
        resolved = msgspec.structs.replace(
            gate, status="resolved", outcome=outcome, note=note, resolved_at=at
        )
        await self._table.put(resolved)
        self._open[gate.worker].remove(gate_id)
        if gate.run is not None:
            self._waiting[gate.run] -= 1
            if not self._waiting[gate.run]:
                del self._waiting[gate.run]
        self._resolved.append(resolved)
        return resolved

    async def get(self, gate_id: str) -> GateState:
        gate = self._table.get(gate_id)
        if gate is None:
            raise NotFoundError("gate", gate_id)
        return gate

    async def all(self, worker: str | None = None) -> list[GateState]:
        return [g for g in self._sorted() if worker is None or g.worker == worker]

    def _sorted(self) -> list[GateState]:
        return sorted(self._table.values(), key=lambda g: (g.filed_at, g.id))

    async def briefing_for(self, worker: str, resolved_since: float | None) -> GateView:
        """Open gates of *worker*, and those resolved after *resolved_since*;
        the compiler narrows them to the run's channel."""
        recent = []
        if resolved_since is not None:
            for gate in reversed(self._resolved):
                if gate.resolved_at is None or gate.resolved_at <= resolved_since:
                    break
                if gate.worker == worker:
                    recent.append(gate.as_gate())
        index = self._open.get(worker) or GateIndex(worker)
        return index.snapshot(reversed(recent))

    async def waiting_on(self, run: str) -> bool:
        """Whether an open gate was filed against *run*."""
        return run in self._waiting

    def _opened(self, gate: GateState) -> None:
        index = self._open.get(gate.worker)
        if index is None:
            index = self._open[gate.worker] = GateIndex(gate.worker)
        index.add(gate.as_gate())
        if gate.run is not None:
            self._waiting[gate.run] = self._waiting.get(gate.run, 0) + 1

    async def aclose(self) -> None:
        await self._table.aclose()
