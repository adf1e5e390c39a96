"""What the indexes of items filed per channel or worker-wide (notes,
gates) share: what a run in one channel sees of their totals, and where
each item is by id."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any, Generic, TypeVar

_P = TypeVar("_P")
_V = TypeVar("_V")


class ById(Generic[_P]):
    """Where each id's items are (a position: an ordinal, an entry), in the
    order they were added. Only added to, so a view may read it from a
    thread. An id given twice (plain inputs can repeat one) keeps its later
    positions aside: the usual id costs one dict entry."""

    __slots__ = ("_first", "_more")

    def __init__(self) -> None:
        self._first: dict[str, _P] = {}
        self._more: dict[str, list[_P]] = {}

    def __repr__(self) -> str:
        return f"ById({len(self._first)} ids)"

    def add(self, item_id: str, position: _P) -> None:
        if self._first.setdefault(item_id, position) is not position:
            self._more.setdefault(item_id, []).append(position)

    def first(self, item_id: str) -> _P | None:
        return self._first.get(item_id)

    def every(self, item_id: str) -> list[_P]:
        """Every position of *item_id*, first added first."""
        first = self._first.get(item_id)
        if first is None:
            return []
        more = self._more.get(item_id)
        return [first] if more is None else [first, *more]

    def having(self, ids: Mapping[str, _V], keep: Callable[[_P], bool]) -> list[tuple[_P, _V]]:
        """Each position of an id of *ids* that *keep* keeps, with the value
        of its id, in position order (positions are distinct: the sort never
        compares values)."""
        found = [
            (position, value)
            for item_id, value in ids.items()
            for position in self.every(item_id)
            if keep(position)
        ]
        found.sort(key=_position)
        return found


_position: Callable[[tuple[Any, Any]], Any] = itemgetter(0)


def scoped_totals(
    totals: Mapping[str | None, tuple[int, int]], channel: str | None
) -> tuple[int, int]:
    """Count and characters of the worker-wide items (``None``) and *channel*'s."""
    count, chars = totals.get(None, (0, 0))
    if channel is not None:
        more, more_chars = totals.get(channel, (0, 0))
        count, chars = count + more, chars + more_chars
    return count, chars
