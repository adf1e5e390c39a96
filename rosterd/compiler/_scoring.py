"""Scoring notes against a query: BM25, then feedback, then neighbours.

The arithmetic of memory ranking, in NumPy over the columns of a
``NoteTable``: vectorised passes over the postings the query's terms touch,
so a turn costs what those postings hold, not what the worker's memory
holds.

1. **BM25** (Robertson and Zaragoza's Okapi weighting, Lucene's always
   positive IDF): a term a few notes hold counts for much, one most notes
   hold for little, and a long note does not win by length alone.
2. **Pseudo-relevance feedback** (Rocchio, RM3): the terms that mark the
   few notes BM25 found best, weighted by their own rarity, are added to
   the query at a lower weight and the notes are scored again, so a note
   that says it in other words still ranks.
3. **Neighbours.** Notes written together (one after another in one scope,
   within ``_memory.TOGETHER_S`` of each other or by one run) are often one story
   told over several notes; each offers its neighbours a share of its score
   (``NEIGHBOURS``, by distance), and a note takes the largest share offered
   to it, so the note that answers sits beside the note that names the
   subject.

Every knob is a module constant, documented in docs/memory.md; none is ever
set per data set. Scores are rounded to a millionth before they are
compared, so equal evidence gives equal scores whatever order the floating
point sums ran in.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._postings import TF_BITS, TF_MAX, prefix

# BM25's term-frequency saturation and length normalisation.
K1 = 1.2
B = 0.75
# The share of a note's score each neighbour receives, by distance (1, 2, ...).
NEIGHBOURS = (0.3, 0.2, 0.1)
# Feedback: how many of the best notes lend their terms, how many terms
# they lend at most, and the weight of the strongest against a query term's 1.
FEEDBACK_NOTES = 3
FEEDBACK_TERMS = 8
FEEDBACK_WEIGHT = 0.2
# A note of more distinct terms than this lends none.
FEEDBACK_NOTE_TERMS = 256
# A term more than this share of the notes hold says little about any of
# them: it only adds to the score of notes a rarer term found, and
# feedback never lends it.
COMMON_SHARE = 0.125
# How many of the best notes lend their neighbours a share of their score.
LENDERS = 64
_SCALE = 1e6

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
# Postings entries as NumPy reads them: ordinal << TF_BITS | tf.
Packed = npt.NDArray[np.uint32]
# How often each note holds a term, by ordinal.
Counts = npt.NDArray[np.uint8]


class Columns:
    """The columns of a ``NoteTable`` as of one snapshot: ``size`` notes."""

    __slots__ = ("channel", "common", "created", "length", "near", "size", "total")

    def __init__(self, table: NoteTable, size: int) -> None:
        self.size = size
        self.length = table.length
        self.created = table.created
        self.channel = table.channel
        self.near = table.near
        # The columns as they are now: a column replaced later (grown) or
        # added (a term that became common) leaves this snapshot's alone.
        self.common = dict(table.common)
        self.total = table.total_length[size - 1] if size else 0.0

    def beside(self, ordinals: Ints) -> Ints:
        """The notes written together with each of *ordinals*, nearest first:
        a row per place (before at distance 1, after at 1, before at 2, ...),
        a column per note; ``-1`` where there is none (or only one written
        after this snapshot)."""
        near = self.near[ordinals[:, None], _NEAREST_FIRST].T
        beside: Ints = np.where(near < self.size, near, -1)
        return beside


class NoteTable:
    """Per note, by ordinal: its term count, time, scope code, the notes
    written together with it up to ``len(NEIGHBOURS)`` places before and
    after it (``near``: before at distance 1, 2, ..., then after), and how
    often it holds each common term (``common``). Grown by doubling: a
    snapshot keeps the arrays it was taken with, and the appender writes
    only past every snapshot's size (the notes after an older note excepted,
    which snapshots read as "none" when they point past their size).

    A term becomes common once more than ``COMMON_SHARE`` of the notes hold
    it, and then has a column, by ordinal, of how often each note holds it
    (capped as in the postings, 0: not at all): a turn reads a common term
    for its candidates at their places, instead of searching postings that
    run through most of the memory once per pass. A snapshot in which a
    term is common has its column: the term became common no later than the
    note that gave it its last entry below the snapshot's size, and columns
    are dropped only as the table grows, from terms no longer common then.
    A column costs a byte a note, at most four times what the term's
    postings take."""

    def __init__(self) -> None:
        self.size = 0
        self.length: Floats = np.zeros(0)
        self.total_length: Floats = np.zeros(0)
        self.created: Floats = np.zeros(0)
        self.channel: Ints = np.zeros(0, np.int64)
        self.near: Ints = np.zeros((0, 2 * len(NEIGHBOURS)), np.int64)
        self.common: dict[str, Counts] = {}

    def append(self, length: int, created: float, channel: int, prev: int) -> int:
        """Enter a note written together with note *prev* (``-1``: none)."""
        ordinal = self.size
        if ordinal == len(self.length):
            self._grow(max(64, 2 * ordinal))
        self.length[ordinal] = length
        self.total_length[ordinal] = length + (self.total_length[ordinal - 1] if ordinal else 0)
        self.created[ordinal] = created
        self.channel[ordinal] = channel
        depth = len(NEIGHBOURS)
        near = self.near[ordinal]
        near[:] = -1
        if prev >= 0:
            # The notes before *prev* are one place further from this one,
            # and this one is after each of them.
            near[0] = prev
            near[1:depth] = self.near[prev, : depth - 1]
            for distance, before in enumerate(near[:depth].tolist()):
                if before < 0:
                    break
                self.near[before, depth + distance] = ordinal
        self.size = ordinal + 1
        return ordinal

    def hold(
        self, postings: Mapping[str, array[int]], terms: Container[str], over: Iterable[str]
    ) -> None:
        """Enter how often the note appended last holds each common term:
        it holds *terms*, whose *postings* end with its entry, of which
        *over* have more than ``floor`` entries (a term not common yet
        becomes common only by such an entry)."""
        common = self.common
        for term, column in common.items():
            if term in terms:
                entry = postings[term][-1]
                column[entry >> TF_BITS] = entry & TF_MAX
        for term in over:
            if term not in common:
                packed = np.array(postings[term], np.uint32)
                column = common[term] = np.zeros(len(self.length), np.uint8)
                column[packed >> TF_BITS] = packed & TF_MAX

    @property
    def floor(self) -> float:
        """A term of more entries than this is common."""
        return COMMON_SHARE * self.size

    def columns(self) -> Columns:
        return Columns(self, self.size)

    def _grow(self, capacity: int) -> None:
        used = self.size
        for name in ("length", "total_length", "created", "channel", "near"):
            old = getattr(self, name)
            new = np.empty((capacity, *old.shape[1:]), old.dtype)
            new[:used] = old[:used]
            setattr(self, name, new)
        # A term that is no longer common gives up its column; one that
        # becomes common again gets it back with the note that makes it so.
        floor = COMMON_SHARE * used
        common: dict[str, Counts] = {}
        for term, column in self.common.items():
            if np.count_nonzero(column[:used]) > floor:
                common[term] = np.zeros(capacity, np.uint8)
                common[term][:used] = column[:used]
        self.common = common


def _idf(notes: int, holding: int) -> float:
    """Lucene's BM25 inverse document frequency: never negative."""
    return math.log(1.0 + (notes - holding + 0.5) / (holding + 0.5))


# A note's distinct terms, by ordinal: what it may lend feedback.
FeedbackSource = Callable[[int], Collection[str]]


@dataclass(frozen=True, slots=True)
class Scored:
    """The candidates of one query: the notes holding one of its terms and
    the notes written beside those, ascending, with their final scores in
    millionths, their own BM25 score (before neighbours lent them any) and
    the neighbour that lent them score (``-1``: none did); the terms
    feedback added to the query; the postings of each term the scoring
    walked, as read; and the columns of the common terms."""

    ordinals: Ints
    final: Ints
    own: Floats
    lender: Ints
    expansion: Mapping[str, float]
    held: Mapping[str, Packed]
    common: Mapping[str, Counts]

    def holding(self, terms: Sequence[str], notes: Ints) -> npt.NDArray[np.bool_]:
        """Which of *notes* (distinct ordinals in the snapshot) hold each of
        *terms*: a row per term. A common term is read from its column, a
        term of many postings searched where they lie, and the others'
        postings looked up among the notes, all in one search."""
        hit = np.zeros((len(terms), len(notes)), np.bool_)
        found: list[tuple[int, Packed]] = []
        for t, term in enumerate(terms):
            counts = self.common.get(term)
            if counts is not None:
                hit[t] = counts[notes] > 0
                continue
            packed = self.held.get(term, _NO_POSTINGS)
            if len(packed) > _SEARCHED_ALONE:
                # Laid end to end with the others, it would be copied whole.
                hit[t] = _entries_of(packed, notes) >= 0
            elif len(packed):
                found.append((t, packed))
        if not found or not len(notes):
            return hit
        # The other terms' entries looked up among the notes, which are
        # few: a short search for each entry, and the entries are few too.
        order = np.argsort(notes)
        among = notes[order]
        every = np.concatenate([packed for _, packed in found]).astype(np.int64) >> TF_BITS
        rows = np.repeat([t for t, _ in found], [len(packed) for _, packed in found])
        at = np.minimum(np.searchsorted(among, every), len(among) - 1)
        there = among[at] == every
        hit[rows[there], order[at[there]]] = True
        return hit


def score(
    columns: Columns,
    postings: Mapping[str, array[int]],
    query: Mapping[str, float],
    admitted: npt.NDArray[np.bool_],
    feedback: FeedbackSource,
) -> Scored:
    """The notes of *columns* whose scope code *admitted* admits, scored
    against *query* (term to weight); *feedback* gives a note's terms."""
    scoring = _Scoring(columns, postings, admitted)
    own_ordinals, own = scoring.bm25(query)
    # Feedback reads the notes the query's own terms found best: a note
    # ranked high only by what its neighbours lend is no evidence of the
    # words the subject is written in.
    expansion = scoring.expansion(query, own_ordinals, own, feedback)
    if expansion:
        # Scored again as one query: a note that holds only a lent term is
        # found, and no second merge of the two passes is needed.
        own_ordinals, own = scoring.bm25({**query, **expansion})
    ordinals, final, lender = scoring.with_neighbours(own_ordinals, own)
    # Every note that holds a term is a candidate: its own score by candidate.
    own_by_candidate = np.zeros(len(ordinals))
    own_by_candidate[np.searchsorted(ordinals, own_ordinals)] = own
    final_scores = np.rint(final * _SCALE).astype(np.int64)
    return Scored(
        ordinals, final_scores, own_by_candidate, lender, expansion, scoring.held, columns.common
    )


def in_scope(codes: int, admitted: Sequence[int]) -> npt.NDArray[np.bool_]:
    """A mask over *codes* scope codes, true for the *admitted* ones."""
    mask = np.zeros(codes + 1, np.bool_)
    mask[list(admitted)] = True
    return mask


class _Scoring:
    """One query's scoring over one snapshot: the notes of *columns* whose
    scope code *admitted* admits, scored from *postings*. ``held`` keeps the
    postings of each term walked, as read, so a second pass (feedback's)
    reads only the terms the first did not."""

    __slots__ = ("admitted", "average", "columns", "held", "postings", "size")

    def __init__(
        self,
        columns: Columns,
        postings: Mapping[str, array[int]],
        admitted: npt.NDArray[np.bool_],
    ) -> None:
        self.columns = columns
        self.postings = postings
        self.admitted = admitted
        self.held: dict[str, Packed] = {}
        self.size = size = columns.size
        self.average = columns.total / size if size and columns.total else 1.0

    def bm25(self, query: Mapping[str, float]) -> tuple[Ints, Floats]:
        """Each admitted note holding a term of *query*, with its BM25 score."""
        columns, postings, size = self.columns, self.postings, self.size
        rare: list[tuple[float, str, int]] = []
        common: list[tuple[float, str, int]] = []
        for term, weight in query.items():
            entries = postings.get(term)
            if entries is None or not (cut := prefix(entries, size)):
                continue
            # A term more than COMMON_SHARE of the notes hold only adds to the
            # score of notes a rarer term found: walking it for every note would
            # cost a turn what the whole memory holds, to tell them apart by little.
            found = (weight * _idf(size, cut), term, cut)
            (rare if cut <= COMMON_SHARE * size else common).append(found)
        if not rare:
            rare, common = common, []
        if not rare:
            return _NONE, _NO_SCORES
        every = self._walked(rare)
        weights = np.repeat([weight for weight, _, _ in rare], [cut for _, _, cut in rare])
        ordinals, summed = _summed([every >> TF_BITS], [self._weighted(weights, every)], size)
        keep = self.admitted[columns.channel[ordinals]]
        ordinals, summed = ordinals[keep], summed[keep]
        for weight, term, _ in common:
            # Read at the candidates' places in the term's column (see NoteTable).
            counts = columns.common[term][ordinals]
            hit = counts > 0
            held_by: Ints = ordinals[hit] << TF_BITS | counts[hit]
            summed[hit] += self._weighted(weight, held_by)
        return ordinals, summed

    def with_neighbours(self, ordinals: Ints, scores: Floats) -> tuple[Ints, Floats, Ints]:
        """*ordinals* and the notes written beside them, each with its score
        from *scores* plus the most that one of the best of them lends it,
        and that lender (``-1``: none)."""
        if not len(ordinals):
            return ordinals, scores, _NONE
        # Only the best LENDERS lend: what a weaker note would lend its
        # neighbours could not lift them to the top of the ranking.
        lenders = ordinals
        lending = scores
        if len(ordinals) > LENDERS:
            best = np.argpartition(-scores, LENDERS)[:LENDERS]
            lenders, lending = ordinals[best], scores[best]
        beside = self.columns.beside(lenders)
        there = beside >= 0
        borrowers, lent = beside[there], (lending * _SHARES[:, None])[there]
        if not len(borrowers):
            return ordinals, scores, np.full(len(ordinals), -1)
        givers = np.broadcast_to(lenders, beside.shape)[there]
        # A note takes the largest share one lender offers, not the sum of
        # them: a run of turns around one match, each lent by several of
        # its neighbours, would crowd the other matches out of the top. On
        # a tie, the nearer lender's (places are nearest first).
        largest_first = np.lexsort((-lent, borrowers))
        borrowers, lent = borrowers[largest_first], lent[largest_first]
        first = np.flatnonzero(np.concatenate(([True], borrowers[1:] != borrowers[:-1])))
        borrowers = borrowers[first]
        candidates, totals = _summed([ordinals, borrowers], [scores, lent[first]], self.size)
        lender = np.full(len(candidates), -1)
        lender[np.searchsorted(candidates, borrowers)] = givers[largest_first][first]
        return candidates, totals, lender

    def expansion(
        self, query: Mapping[str, float], ordinals: Ints, final: Floats, feedback: FeedbackSource
    ) -> dict[str, float]:
        """Up to ``FEEDBACK_TERMS`` terms of the best of *ordinals* (by
        *final*, their scores), not in *query*, each with its weight: how
        much of those notes it makes up, by their score, times its rarity."""
        if not len(ordinals):
            return {}
        size = self.size
        # Best first, ties by ordinal; a few more than needed, for long notes.
        # Only the notes scoring at least the k-th best are sorted.
        scores = np.rint(final * _SCALE)
        wanted = min(len(scores), 4 * FEEDBACK_NOTES)
        least = np.partition(scores, len(scores) - wanted)[len(scores) - wanted]
        near = np.flatnonzero(scores >= least)
        best = near[np.lexsort((ordinals[near], -scores[near]))][:wanted]
        top = float(final[best[0]])
        if top <= 0.0:
            return {}
        weights: dict[str, float] = {}
        lent = 0
        for at in best.tolist():
            terms = feedback(int(ordinals[at]))
            # A long note lends each of its terms a sliver of its weight, and
            # reading them all would cost a turn what the note holds.
            if len(terms) > FEEDBACK_NOTE_TERMS:
                continue
            share = float(final[at]) / top / max(len(terms), 1)
            # A query term is never lent, so its share is not even summed.
            for term in terms:
                if term not in query:
                    weights[term] = weights.get(term, 0.0) + share
            lent += 1
            if lent == FEEDBACK_NOTES:
                break
        # Negated, so the strongest sort first and a tie by term, as tuples do.
        rare: list[tuple[float, str]] = []
        most = COMMON_SHARE * size
        postings = self.postings
        for term, weight in weights.items():
            if (holders := postings.get(term)) is None:
                continue
            holding = prefix(holders, size)
            if 2 <= holding <= most:
                rare.append((-weight * _idf(size, holding), term))
        rare.sort()
        chosen = rare[:FEEDBACK_TERMS]
        if not chosen:
            return {}
        strongest = -chosen[0][0]
        return {term: FEEDBACK_WEIGHT * -weight / strongest for weight, term in chosen}

    def _walked(self, terms: Sequence[tuple[float, str, int]]) -> Ints:
        """The first *cut* postings of each of *terms* (weight, term, cut), end
        to end; each term's read once per query, into ``held``."""
        held = self.held
        unread = [(term, cut) for _, term, cut in terms if term not in held]
        if unread:
            # One copy of them all: a view would pin the arrays, which the loop
            # appends to.
            copied = array("I")
            postings = self.postings
            for term, cut in unread:
                copied += postings[term][:cut]
            read = np.frombuffer(copied, dtype=np.uint32)
            at = 0
            for term, cut in unread:
                held[term] = read[at : at + cut]
                at += cut
            if len(unread) == len(terms):
                return read.astype(np.int64)
        return np.concatenate([held[term] for _, term, _ in terms]).astype(np.int64)

    def _weighted(self, weight: float | Floats, packed: Ints) -> Floats:
        """BM25's weight of a term (or of each entry's own term, *weight* an
        array) in the notes of *packed*, postings entries."""
        tf = (packed & TF_MAX).astype(np.float64)
        norm = K1 * (1.0 - B + B * self.columns.length[packed >> TF_BITS] / self.average)
        weighted: Floats = (weight * (K1 + 1.0)) * tf / (tf + norm)
        return weighted


def _entries_of(packed: Packed, ordinals: Ints) -> Ints:
    """The entry of each of *ordinals* in one term's postings,
    ``-1`` where the note does not hold the term. Searched where the
    postings lie, as they are: long postings are never converted or
    copied again."""
    if not len(ordinals):
        return ordinals
    at = np.searchsorted(packed, (ordinals << TF_BITS).astype(np.uint32))
    found = packed[np.minimum(at, len(packed) - 1)].astype(np.int64)
    return np.where((found >> TF_BITS) == ordinals, found, -1)


def _summed(ordinals: list[Ints], scores: list[Floats], size: int) -> tuple[Ints, Floats]:
    """Each distinct ordinal of *ordinals*, ascending, with its scores summed.

    Few entries are sorted and merged; once they are more than one in
    ``_DENSE`` of the notes, one pass over an array of every note is cheaper
    than the sort (a term most notes hold, say).
    """
    every = np.concatenate(ordinals)
    weights = np.concatenate(scores)
    if len(every) * _DENSE >= size:
        summed = np.asarray(np.bincount(every, weights, size), dtype=np.float64)
        distinct: Ints = np.flatnonzero(summed).astype(np.int64)
        return distinct, summed[distinct]
    # A stable sort keeps each ordinal's entries in input order, so each sum
    # adds them as the dense path does.
    order = np.argsort(every, kind="stable")
    ordered = every[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    totals: Floats = np.add.reduceat(weights[order], starts)
    return ordered[starts], totals


_DENSE = 16
# The columns of ``NoteTable.near`` nearest first, and the share each lends.
_NEAREST_FIRST = np.array(
    [column for d in range(len(NEIGHBOURS)) for column in (d, len(NEIGHBOURS) + d)]
)
_SHARES: Floats = np.repeat(NEIGHBOURS, 2)
# Postings longer than this are searched on their own (see Scored.holding).
_SEARCHED_ALONE = 4096
_NONE: Ints = np.zeros(0, np.int64)
_NO_POSTINGS: Packed = np.zeros(0, np.uint32)
_NO_SCORES: Floats = np.zeros(0)
