"""A file store of what it opens on first use, one per key (a channel's log,
a worker's notes), all closed together."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import anyio


class _Closable(Protocol):
    async def aclose(self) -> None: ...


R = TypeVar("R", bound=_Closable)


class Opened(Generic[R], ABC):
    """A store under *root* holding each key's resource, opened by ``_open``
    on the key's first use and held until ``aclose``."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._held: dict[str, R] = {}
        # Callers of a key being opened wait for that open rather than
        # start their own: a worker's notes take seconds to index, and a
        # start's warm-up and the first turns of many sessions all ask.
        self._opening: dict[str, anyio.Lock] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._root)!r}, {len(self._held)} open)"

    @abstractmethod
    async def _open(self, key: str) -> R:
        """*key*'s resource, read from its files under the root."""

    async def _get(self, key: str) -> R:
        held = self._held.get(key)
        if held is not None:
            return held
        async with self._opening.setdefault(key, anyio.Lock()):
            held = self._held.get(key)
            if held is None:
                # An open that fails leaves the next caller to try again.
                held = self._held[key] = await self._open(key)
        return held

    async def aclose(self) -> None:
        for held in self._held.values():
            await held.aclose()
        self._held.clear()
