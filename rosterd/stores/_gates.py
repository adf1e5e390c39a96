"""Gates: questions a worker waits on, filed and resolved by people."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from .._errors import ConflictError, NotFoundError
from ..compiler import Gate
from ._files import StateTable

__all__ = ("GateState", "GateStore")


class GateState(msgspec.Struct, frozen=True):
    id: str
    worker: str
    summary: str
    filed_at: float
    channel: str | None = None
    run: str | None = None
    status: Literal["open", "resolved"] = "open"
    outcome: str | None = None
    note: str = ""
    resolved_at: float | None = None

    def as_gate(self) -> Gate:
        return Gate(
            id=self.id,
            worker=self.worker,
            summary=self.summary,
            filed_at=self.filed_at,
            channel=self.channel,
            run=self.run,
            outcome=self.outcome,
            note=self.note,
        )


class GateStore:
    """All gates in ``gates.jsonl``; open ones feed the next briefing."""

    def __init__(self, table: StateTable[GateState]) -> None:
        self._table = table
        # Every turn reads the open gates and those resolved since the
        # session's last turn: indexes keep that independent of how many
        # gates were ever filed.
        gates = self.all()
        self._open = {g.id: g for g in gates if g.status == "open"}
        self._resolved = sorted(
            (g for g in gates if g.resolved_at is not None), key=lambda g: g.resolved_at or 0.0
        )

    def __repr__(self) -> str:
        return f"GateStore({len(self._table)} gates)"

    @classmethod
    async def open(cls, path: Path) -> GateStore:
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
        self._open[gate.id] = gate
        return gate

    async def resolve(self, gate_id: str, outcome: str, note: str, at: float) -> GateState:
        gate = self.get(gate_id)
        if gate.status != "open":
            raise ConflictError(f"gate {gate_id!r} is already resolved ({gate.outcome})")
        resolved = msgspec.structs.replace(
            gate, status="resolved", outcome=outcome, note=note, resolved_at=at
        )
        await self._table.put(resolved)
        self._open.pop(gate_id, None)
        self._resolved.append(resolved)
        return resolved

    def get(self, gate_id: str) -> GateState:
        gate = self._table.get(gate_id)
        if gate is None:
            raise NotFoundError("gate", gate_id)
        return gate

    def all(self) -> list[GateState]:
        return sorted(self._table.values(), key=lambda g: (g.filed_at, g.id))

    def open_for(self, worker: str) -> tuple[Gate, ...]:
        """Open gates of *worker*; the compiler narrows them to the run's channel."""
        return self.briefing_for(worker, resolved_since=None)

    def briefing_for(self, worker: str, resolved_since: float | None) -> tuple[Gate, ...]:
        """Open gates of *worker*, and those resolved after *resolved_since*."""
        gates = [g for g in self._open.values() if g.worker == worker]
        if resolved_since is not None:
            recent = []
            for gate in reversed(self._resolved):
                if gate.resolved_at is None or gate.resolved_at <= resolved_since:
                    break
                if gate.worker == worker:
                    recent.append(gate)
            gates.extend(reversed(recent))
        return tuple(g.as_gate() for g in gates)

    async def aclose(self) -> None:
        await self._table.aclose()
