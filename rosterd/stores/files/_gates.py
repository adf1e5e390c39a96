"""Gates: questions a worker waits on, filed and resolved by people."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import msgspec

from ..._errors import ConflictError
from ...compiler import GateView
from ...protocol import GateState
from .._gatebook import GateBook, filing_order
from ._jsonl import StateTable


class FileGates:
    """All gates in ``gates.jsonl``; open ones feed the next briefing."""

    def __init__(self, table: StateTable[GateState]) -> None:
        self._table = table
        self._book = GateBook()
        for gate in self._sorted():
            self._book.apply(gate)

    def __repr__(self) -> str:
        return f"FileGates({len(self._table)} gates)"

    @classmethod
    async def open(cls, path: Path) -> FileGates:
        return cls(await StateTable.open(path, GateState, "gate", "g"))

    async def file(
        self, worker: str, summary: str, at: float, channel: str | None, run: str | None
    ) -> GateState:
        gate = await self._table.insert(
            lambda key: GateState(
                id=key, worker=worker, summary=summary, filed_at=at, channel=channel, run=run
            )
        )
        self._book.apply(gate)
        return gate

    async def resolve(self, gate_id: str, outcome: str, note: str, at: float) -> GateState:
        gate = await self.get(gate_id)
        if gate.status != "open":
            raise ConflictError(f"gate {gate_id!r} is already resolved ({gate.outcome})")
        resolved = msgspec.structs.replace(
            gate, status="resolved", outcome=outcome, note=note, resolved_at=at
        )
        await self._table.put(resolved)
        self._book.apply(resolved)
        return resolved

    async def get(self, gate_id: str) -> GateState:
        return self._table.get(gate_id)

    async def all(self, worker: str | None = None) -> list[GateState]:
        return [g for g in self._sorted() if worker is None or g.worker == worker]

    def _sorted(self) -> list[GateState]:
        return filing_order(self._table.values())

    async def briefing_for(
        self, worker: str, resolved_since: float | None, *, cached: bool = False
    ) -> GateView:
        # Every gate is in memory, current: cached or not, the same answer.
        return self._book.briefing(worker, resolved_since)

    async def waiting_on(self, run: str) -> bool:
        return self._book.waiting_on(run)

    async def open_against_runs(self) -> list[GateState]:
        return self._book.open_against_runs()

    async def against(self, runs: Collection[str]) -> list[GateState]:
        # Every gate is in memory: looking at each costs no read.
        wanted = set(runs)
        return filing_order(g for g in self._table.values() if g.run in wanted)

    async def aclose(self) -> None:
        await self._table.aclose()
