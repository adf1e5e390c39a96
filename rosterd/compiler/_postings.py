"""How a memory index keeps which notes hold a term: its postings.

A term's postings are one ``array('I')``, ascending: each entry a note's
ordinal shifted left by ``TF_BITS``, with how often the note holds the term
in the low bits (capped: BM25 saturates long before). Notes are entered in
ordinal order, so a snapshot of the first *n* notes reads a prefix, and an
entry below it never moves while later notes are appended.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

TF_BITS = 4
TF_MAX = (1 << TF_BITS) - 1


def entry(ordinal: int, count: int) -> int:
    """The posting of note *ordinal*, which holds the term *count* times."""
    return ordinal << TF_BITS | min(count, TF_MAX)


def prefix(postings: array[int], size: int) -> int:
    """How many of *postings* belong to the first *size* notes."""
    return bisect_left(postings, size << TF_BITS)
