"""The gates every briefing reads, kept in memory by each backend."""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable

from ..compiler import GateIndex, GateView
from ..protocol import GateState


def _resolved_at(gate: GateState) -> float:
    return gate.resolved_at or 0.0


def filing_order(gates: Iterable[GateState]) -> list[GateState]:
    """*gates* in filing order, as every backend lists them (ids compare
    as strings)."""
    return sorted(gates, key=lambda g: (g.filed_at, g.id))


class GateBook:
    """Open gates per worker and per run, resolved ones by time.

    Every turn reads the open gates it can show and those resolved since
    the session's last turn: kept here, that costs what is shown, not how
    many gates were ever filed.
    """

    def __init__(self) -> None:
        self._open: dict[str, GateIndex] = {}
        self._open_gates: dict[str, GateState] = {}
        self._waiting: dict[str, int] = {}  # open gates per run
        self._resolved: list[GateState] = []  # by resolution time

    def __repr__(self) -> str:
        return f"GateBook({len(self._open_gates)} open, {len(self._resolved)} resolved)"

    def apply(self, gate: GateState) -> None:
        """Take *gate*'s latest state: filed, or resolved."""
        held = self._open_gates.get(gate.id)
        if gate.status == "open":
            if held is None:
                self._opened(gate)
            return
        if held is not None:
            del self._open_gates[gate.id]
            self._open[gate.worker].remove(gate.id)
            if gate.run is not None:
                self._waiting[gate.run] -= 1
                if not self._waiting[gate.run]:
                    del self._waiting[gate.run]
        insort(self._resolved, gate, key=_resolved_at)

    def briefing(self, worker: str, resolved_since: float | None) -> GateView:
        """Open gates of *worker*, and those resolved after *resolved_since*;
        the compiler narrows them to the run's channel."""
        recent = []
        if resolved_since is not None:
            for gate in reversed(self._resolved):
                if _resolved_at(gate) <= resolved_since:
                    break
                if gate.worker == worker:
                    recent.append(gate)
        index = self._open.get(worker)
        if index is None:
            index = GateIndex(worker)
        return index.snapshot(reversed(recent))

    def waiting_on(self, run: str) -> bool:
        return run in self._waiting

    def open_against_runs(self) -> list[GateState]:
        """Every open gate filed against a run, in filing order."""
        return filing_order(g for g in self._open_gates.values() if g.run is not None)

    def clear(self) -> None:
        self._open.clear()
        self._open_gates.clear()
        self._waiting.clear()
        self._resolved.clear()

    def _opened(self, gate: GateState) -> None:
        self._open_gates[gate.id] = gate
        index = self._open.get(gate.worker)
        if index is None:
            index = self._open[gate.worker] = GateIndex(gate.worker)
        index.add(gate)
        if gate.run is not None:
            self._waiting[gate.run] = self._waiting.get(gate.run, 0) + 1
