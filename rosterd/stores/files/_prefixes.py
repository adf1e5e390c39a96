"""``prefixes/<worker>/<channel>.json``: the last compiled prefix of each pair."""

from __future__ import annotations

from pathlib import Path

from ..._ids import check_id
from ...compiler import PrefixState
from ._jsonl import read_document, write_document


class FilePrefixes:
    """One small document per (worker, channel), cached after the first read."""

    def __init__(self, state: Path) -> None:
        self._root = state / "prefixes"
        self._states: dict[tuple[str, str | None], PrefixState | None] = {}
        # What each file holds: a put whose write failed is not in it.
        self._written: dict[tuple[str, str | None], PrefixState | None] = {}

    def __repr__(self) -> str:
        return f"FilePrefixes({str(self._root)!r})"

    async def get(
        self, worker: str, channel: str | None, *, cached: bool = False
    ) -> PrefixState | None:
        key = (worker, channel)
        if key not in self._states:
            stored = await read_document(self._path(worker, channel), PrefixState)
            self._states[key] = self._written[key] = stored
        return self._states[key]

    async def put(self, worker: str, channel: str | None, state: PrefixState) -> None:
        await self.get(worker, channel)
        key = (worker, channel)
        self._states[key] = state
        # Within a session only the time moves on: not worth an fsync a turn.
        # Compared with the file, so that the next put writes a failed one.
        written = self._written[key]
        if written is None or written.run != state.run or written.boundaries != state.boundaries:
            await write_document(self._path(worker, channel), state)
            self._written[key] = state

    def _path(self, worker: str, channel: str | None) -> Path:
        name = f"{check_id('channel', channel)}.json" if channel is not None else "_direct.json"
        return self._root / check_id("worker", worker) / name
