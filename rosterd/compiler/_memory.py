"""Ranking memory for the current message: relevance, recency, then id.

Relevance is the number of distinct words (three letters or more, any case)
an item shares with the message. Integer scores and an id tie-break keep the
order total and deterministic: the same items and message always rank the
same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from ._inputs import MemoryItem

__all__ = ("rank_memory",)

_WORD = re.compile(r"[^\W_]{3,}")
# Each word seen gets one bit, so "shared words" is an AND and a popcount:
# this runs over every memory item every turn. Which bit a word gets never
# changes a count, so the cache cannot change an answer; it is reset at the
# start of a call once it grows past this many words.
_MAX_WORDS = 1 << 16
_bits: dict[str, int] = {}


@lru_cache(maxsize=8192)
def _mask(text: str) -> int:
    mask = 0
    for word in set(_WORD.findall(text.lower())):
        bit = _bits.get(word)
        if bit is None:
            bit = _bits[word] = 1 << len(_bits)
        mask |= bit
    return mask


def rank_memory(items: Iterable[MemoryItem], message: str) -> list[MemoryItem]:
    """Most relevant first: shared words with *message*, then newest, then id.

    Equal keys keep their input order, as a stable sort would.
    """
    if len(_bits) > _MAX_WORDS:
        _bits.clear()
        _mask.cache_clear()
    query = _mask(message)
    ranked = sorted(
        (-(query & _mask(item.text)).bit_count(), -item.created_at, item.id, index, item)
        for index, item in enumerate(items)
    )
    return [entry[4] for entry in ranked]
