"""What a file store opens on first use, one per key (a channel's log, a
worker's notes), and closes together."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar


class _Closable(Protocol):
    async def aclose(self) -> None: ...


R = TypeVar("R", bound=_Closable)


class Opened(Generic[R]):
    """Each key's resource, opened by *opener* on the key's first use and
    held until ``aclose``."""

    def __init__(self, opener: Callable[[str], Awaitable[R]]) -> None:
        self._opener = opener
        self._held: dict[str, R] = {}

    def __len__(self) -> int:
        return len(self._held)

    async def get(self, key: str) -> R:
        held = self._held.get(key)
        if held is None:
            opened = await self._opener(key)
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
