"""Ranking memory for the current message: relevance, recency, then id.

Integer word-overlap scores and an id tie-break keep the order total and
deterministic: the same items and message always rank the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from ._inputs import MemoryItem

__all__ = ("rank_memory",)

_WORD = re.compile(r"[^\W_]{3,}")


@lru_cache(maxsize=4096)
def _words(text: str) -> frozenset[str]:
    return frozenset(match.lower() for match in _WORD.findall(text))


def rank_memory(items: Iterable[MemoryItem], message: str) -> list[MemoryItem]:
    """Most relevant first: shared words with *message*, then newest, then id."""
    query = _words(message)
    return sorted(
        items, key=lambda item: (-len(query & _words(item.text)), -item.created_at, item.id)
    )
