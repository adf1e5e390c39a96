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
# Every word of a memory item gets one bit, so "shared words" is an AND and a
# popcount: this runs over every memory item every turn. Which bit a word gets
# never changes a count, so this cache cannot change an answer. Only item
# words get bits (a message word no item has cannot be shared), which bounds
# the vocabulary by what memory holds; past the limit it starts afresh.
_MAX_WORDS = 1 << 15
_bits: dict[str, int] = {}


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


@lru_cache(maxsize=4096)
def _item_mask(text: str) -> int:
    mask = 0
    for word in _words(text):
        bit = _bits.get(word)
        if bit is None:
            bit = _bits[word] = 1 << len(_bits)
        mask |= bit
    return mask


def _message_mask(text: str) -> int:
    mask = 0
    for word in _words(text):
        mask |= _bits.get(word, 0)
    return mask


def rank_memory(items: Iterable[MemoryItem], message: str) -> list[MemoryItem]:
    """Most relevant first: shared words with *message*, then newest, then id.

    Equal keys keep their input order, as a stable sort would.
    """
    if len(_bits) > _MAX_WORDS:
        _bits.clear()
        _item_mask.cache_clear()
    items = list(items)
    # Item masks first: they may add bits the message's mask must see.
    masks = [_item_mask(item.text) for item in items]
    query = _message_mask(message)
    ranked = sorted(
        (-(query & mask).bit_count(), -item.created_at, item.id, index)
        for index, (item, mask) in enumerate(zip(items, masks, strict=True))
    )
    return [items[entry[3]] for entry in ranked]
