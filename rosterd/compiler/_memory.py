"""Ranking memory for the current message: relevance, recency, then id.

Integer word-overlap scores and an id tie-break keep the order total and
deterministic: the same items and message always rank the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from operator import attrgetter, neg

from ._inputs import MemoryItem

__all__ = ("rank_memory",)

_WORD = re.compile(r"[^\W_]{3,}")
_text = attrgetter("text")
_created_at = attrgetter("created_at")
_id = attrgetter("id")


@lru_cache(maxsize=4096)
def _words(text: str) -> frozenset[str]:
    return frozenset(map(str.lower, _WORD.findall(text)))


def rank_memory(items: Iterable[MemoryItem], message: str) -> list[MemoryItem]:
    """Most relevant first: shared words with *message*, then newest, then id.

    Equal keys keep their input order, as a stable sort would.
    """
    items = list(items)
    query = _words(message)
    # Built from C-level maps: this runs over every memory item every turn.
    shared = map(len, map(query.intersection, map(_words, map(_text, items))))
    keys = zip(
        map(neg, shared),
        map(neg, map(_created_at, items)),
        map(_id, items),
        range(len(items)),
        strict=True,
    )
    return [items[key[3]] for key in sorted(keys)]
