"""What an open run is on every backend: its info, the last turn it traced,
and how it finishes (its final info written by the backend's ``end``)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..protocol import RunInfo, RunStatus
from ._records import ended


class OpenRun(ABC):
    """The part of an ``ActiveRun`` that does not depend on where it is stored."""

    def __init__(self, info: RunInfo, last_turn: int) -> None:
        self.info = info
        # The highest turn whose trace is durable, failed compilations
        # included: the backend's write raises it once the trace is.
        self.last_turn = last_turn

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.info.id!r}, {self.info.status})"

    async def finish(self, status: RunStatus, at: float, error: str | None = None) -> None:
        await self.end(ended(self.info, status, at, error))

    @abstractmethod
    async def end(self, info: RunInfo) -> None:
        """Write the run's final *info* and release it."""
