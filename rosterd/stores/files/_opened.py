"""A file store of what it opens on first use, one per key (a channel's log,
a worker's notes), all closed together."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Generic, Protocol, TypeVar


class _Closable(Protocol):
    async def aclose(self) -> None: ...


R = TypeVar("R", bound=_Closable)


class Opened(Generic[R], ABC):
    """A store under *root* holding each key's resource, opened by ``_open``
    on the key's first use and held until ``aclose``."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._held: dict[str, R] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._root)!r}, {len(self._held)} open)"

    @abstractmethod
    async def _open(self, key: str) -> R:
        """*key*'s resource, read from its files under the root."""

    async def _get(self, key: str) -> R:
        held = self._held.get(key)
        if held is None:
            opened = await self._open(key)
            # Another task may have opened the key meanwhile: the first to
            # finish is the one every caller shares, the other is closed.
            held = self._held.setdefault(key, opened)
            if held is not opened:
                await opened.aclose()
        return held

    async def aclose(self) -> None:
        for held in self._held.values():
            await held.aclose()
        self._held.clear()
