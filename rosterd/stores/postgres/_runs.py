"""STUB, to be replaced by D's ``_runs.py`` (branch pg-runs) when merged.

Only here so that ``PostgresState.runs`` type-checks and imports on this
branch; every method raises. Take the other branch's file whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg_pool import AsyncConnectionPool

from ...compiler import ContextRecord
from ...protocol import RunInfo, RunStatus, TranscriptEntry
from .._records import SessionState

__all__ = ("PostgresRun", "PostgresRuns")


class PostgresRun:
    def __init__(self, info: RunInfo) -> None:
        self.info = info
        self.last_turn = 0

    async def trace(self, record: ContextRecord) -> None:
        raise NotImplementedError

    async def record(self, entry: TranscriptEntry) -> None:
        raise NotImplementedError

    async def record_many(self, entries: Sequence[TranscriptEntry]) -> None:
        raise NotImplementedError

    async def finish(self, status: RunStatus, at: float, error: str | None = None) -> None:
        raise NotImplementedError

    async def end(self, info: RunInfo) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError


class PostgresRuns:
    def __init__(self, pool: AsyncConnectionPool, where: str) -> None:
        self._pool = pool
        self.where = where

    def new_id(self, prefix: str, now: float) -> str:
        raise NotImplementedError

    async def create(self, info: RunInfo) -> PostgresRun:
        raise NotImplementedError

    async def reopen(self, info: RunInfo) -> tuple[PostgresRun, list[TranscriptEntry]]:
        raise NotImplementedError

    async def recover(self, now: float) -> int:
        raise NotImplementedError

    async def write_info(self, info: RunInfo) -> None:
        raise NotImplementedError

    async def save_session(self, run: str, state: SessionState) -> None:
        raise NotImplementedError

    async def load_session(self, run: str) -> SessionState | None:
        raise NotImplementedError

    async def session_for(self, worker: str, channel: str) -> str | None:
        raise NotImplementedError

    async def set_session(self, worker: str, channel: str, session: str) -> None:
        raise NotImplementedError

    async def clear_session(self, worker: str, channel: str) -> None:
        raise NotImplementedError

    async def info(self, run: str) -> RunInfo:
        raise NotImplementedError

    async def all(self) -> list[RunInfo]:
        raise NotImplementedError

    async def context(self, run: str) -> list[ContextRecord]:
        raise NotImplementedError

    async def transcript(self, run: str) -> list[TranscriptEntry]:
        raise NotImplementedError
