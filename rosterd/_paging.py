"""A page of a list kept oldest first, as every list method pages it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from ._errors import NotFoundError


class _Listed(Protocol):
    @property
    def id(self) -> str: ...


_L = TypeVar("_L", bound=_Listed)


def newest_page(items: Sequence[_L], kind: str, limit: int | None, before: str | None) -> list[_L]:
    """Of *items*, oldest first, the newest *limit* that come before the one
    whose id is *before* (all of them before it without *limit*), oldest
    first; an unknown *before* is ``NotFoundError`` naming *kind*."""
    end = len(items)
    if before is not None:
        at = next((n for n, item in enumerate(items) if item.id == before), None)
        if at is None:
            raise NotFoundError(kind, before)
        end = at
    start = 0 if limit is None else max(0, end - limit)
    return list(items[start:end])
