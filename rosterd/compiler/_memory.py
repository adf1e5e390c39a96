"""Ranking memory for the current message: relevance, recency, then id.

A ``MemoryIndex`` holds one worker's notes: per term (``_terms``) the notes
holding it, per note its length, time, scope, the notes written together
with it and how often it holds each term many notes hold
(``_scoring.NoteTable``), and per scope the notes in recency order.
A ``MemoryView`` is a snapshot of its first *n* notes; ranking a message
against it scores, by ``_scoring``, only the notes that hold one of its
terms or sit beside one, then walks the rest newest first. The walk is
lazy: the compiler stops taking once the memory block is full.

The order is total and deterministic: score (BM25 with neighbours and
feedback, in millionths), then newest, then id, then the order notes were
added. It depends on the notes and the message alone, so the same notes
rank the same way on every backend and after a restart. Document
frequencies and lengths count every note of the worker up to the snapshot,
whatever its scope, retired ones included: a retirement or a note in
another channel never reorders what a scope sees by more than any note
does.

A short message (fewer than ``SHORT_MESSAGE`` terms, "and what did he
buy?") borrows the terms of the session's latest messages at a lower
weight, so it still finds what the conversation is about.

A retired note stays in the index (its ordinal and postings do not move)
but never ranks again and no longer counts in the scope's totals: each view
holds the set of retired ordinals as of its snapshot. It is hidden, not
forgotten: it still lends its neighbours score and feedback its terms, as
a note the session holds does, so a retirement takes that one note out of
the order and moves no other.

The index is append-only, so later additions never change a compilation
under way, and a view may be read from a worker thread while the event
loop adds notes: every structure a view reads is either only appended to,
with the view reading below its snapshot length, or replaced whole, never
edited in place.
"""

from __future__ import annotations

import heapq
from array import array
from collections import Counter
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping, Sequence
from itertools import compress
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from ._items import MemoryItem, Retirement
from ._postings import entry
from ._scoped import ById, scoped_totals
from ._terms import held_terms, term_forms, terms

if TYPE_CHECKING:
    from ._scoring import Columns, Floats, Ints, NoteTable, Scored

# A message of fewer terms than this is short: it borrows the terms of the
# session's latest CONTEXT_MESSAGES messages, each weighing CONTEXT_WEIGHT
# against its own terms' 1.
SHORT_MESSAGE = 4
CONTEXT_MESSAGES = 2
CONTEXT_WEIGHT = 0.5
# Notes of one scope this close in time are written together.
TOGETHER_S = 3_600.0
# How many of the best candidates are put in order at once: the block holds
# a few dozen notes, and a session passes over those it already showed.
_HEAD = 256
# Walk order of equally scored notes: newest first, then id, then age.
_Key = tuple[float, str, int]
_V = TypeVar("_V")
# Why a shown note ranked: the message's words it holds, the borrowed terms
# it holds, and the id of the note that lent it the most score.
Reason = tuple[tuple[str, ...], tuple[str, ...], str | None]


class Ranked(NamedTuple):
    """A note as ranked: its place in the index, the note, its score (0 for
    a note that shares nothing with the message) and the part of it its own
    terms earned (the rest its neighbours lent it)."""

    ordinal: int
    item: MemoryItem
    score: float
    own: float = 0.0


class MemoryIndex:
    """One worker's notes, indexed by term and by recency per channel."""

    def __init__(
        self, items: Iterable[MemoryItem] = (), retirements: Iterable[Retirement] = ()
    ) -> None:
        # NumPy is loaded where memory is indexed, never by a client command.
        from ._scoring import NoteTable

        self._items: list[MemoryItem] = []
        self._table: NoteTable = NoteTable()
        # Term to the notes holding it, ascending: each entry an ordinal
        # shifted left by TF_BITS, with how often the note holds the term in
        # the low bits. Ordinal order makes a snapshot's postings a prefix.
        self._postings: dict[str, array[int]] = {}
        # Sessions look up the notes they already showed by id.
        self._ids: ById[int] = ById()
        # Per channel (None: worker-wide), ordinals in reverse walk order,
        # so the newest note, the usual addition, is an append; each
        # channel's code in the table, and its latest note.
        self._recent: dict[str | None, list[int]] = {}
        self._codes: dict[str | None, int] = {}
        self._latest: dict[str | None, int] = {}
        self._totals: dict[str | None, tuple[int, int]] = {}
        # Per channel, the fewest characters of a note's id and text: no
        # note's line is shorter, so a block with less room is full.
        self._shortest: dict[str | None, int] = {}
        # Ordinals of retired notes, replaced whole on each retirement (a
        # view keeps the set it was made with), and each retirement by note id.
        self._retired: frozenset[int] = frozenset()
        self._retirements: dict[str, Retirement] = {}
        # Per run, the ordinals of the notes it wrote, in order: a session
        # holds its own notes in its conversation already.
        self._written: dict[str, list[int]] = {}
        for item in items:
            self._enter(item)
        for ordinals in self._recent.values():
            ordinals.sort(key=self._key, reverse=True)
        for retirement in retirements:
            self.retire(retirement)

    def __repr__(self) -> str:
        return f"MemoryIndex({len(self._items)} notes, {len(self._postings)} terms)"

    def items(self) -> tuple[MemoryItem, ...]:
        """Every note, oldest first."""
        return tuple(self._items)

    def live(self, item_id: str) -> MemoryItem | None:
        """The note *item_id*, unless there is none such or it is retired."""
        ordinal = self._ids.first(item_id)
        if ordinal is None or ordinal in self._retired:
            return None
        return self._items[ordinal]

    def retirements(self) -> Mapping[str, Retirement]:
        """Each retired note's retirement, by note id."""
        return self._retirements

    def retire(self, retirement: Retirement) -> bool:
        """Retire note ``retirement.note``; whether it was a live note (a
        second retirement of one note, say from two hosts, changes nothing)."""
        item = self.live(retirement.note)
        if item is None:
            return False
        ordinals = self._ids.every(item.id)
        self._retired = self._retired.union(ordinals)
        self._retirements[item.id] = retirement
        for ordinal in ordinals:
            retired = self._items[ordinal]
            count, chars = self._totals[retired.channel]
            self._totals[retired.channel] = (count - 1, chars - len(retired.text))
        return True

    def add(self, item: MemoryItem) -> None:
        ordinal = self._enter(item)
        # Out of recency order (a clock that went back, equal times): a new
        # list, since views may be reading the old one.
        recent = self._recent[item.channel]
        if len(recent) > 1 and self._key(recent[-2]) <= self._key(ordinal):
            recent.pop()
            at = _insertion_point(recent, self._key(ordinal), self._key)
            self._recent[item.channel] = [*recent[:at], ordinal, *recent[at:]]

    def snapshot(self) -> MemoryView:
        """The notes added so far, unaffected by later additions."""
        return MemoryView(self)

    def _enter(self, item: MemoryItem) -> int:
        channel = item.channel
        code = self._codes.setdefault(channel, len(self._codes))
        held = terms(item.text)
        latest = self._latest.get(channel, -1)
        if latest >= 0:
            before = self._items[latest]
            together = (item.run is not None and item.run == before.run) or abs(
                item.created_at - before.created_at
            ) <= TOGETHER_S
            if not together:
                latest = -1
        ordinal = self._table.append(len(held), item.created_at, code, latest)
        self._items.append(item)
        self._latest[channel] = ordinal
        self._ids.add(item.id, ordinal)
        postings = self._postings
        counts = Counter(held)
        floor = self._table.floor
        over = []
        for term, count in counts.items():
            posting = entry(ordinal, count)
            found = postings.get(term)
            if found is None:
                found = postings[term] = array("I", (posting,))
            else:
                found.append(posting)
            if len(found) > floor:
                over.append(term)
        self._table.hold(postings, counts, over)
        if item.run is not None:
            self._written.setdefault(item.run, []).append(ordinal)
        self._recent.setdefault(channel, []).append(ordinal)
        count, chars = self._totals.get(channel, (0, 0))
        self._totals[channel] = (count + 1, chars + len(item.text))
        size = len(item.id) + len(item.text)
        if size < self._shortest.get(channel, size + 1):
            self._shortest[channel] = size
        return ordinal

    def _key(self, ordinal: int) -> _Key:
        item = self._items[ordinal]
        return (-item.created_at, item.id, ordinal)


def _insertion_point(ordinals: list[int], key: _Key, key_of: Callable[[int], _Key]) -> int:
    """Where *key* goes in *ordinals*, which are sorted by descending key."""
    low, high = 0, len(ordinals)
    while low < high:
        middle = (low + high) // 2
        if key_of(ordinals[middle]) > key:
            low = middle + 1
        else:
            high = middle
    return low


class MemoryView:
    """A snapshot of a ``MemoryIndex``: what one compilation may rank."""

    __slots__ = (
        "_codes",
        "_columns",
        "_index",
        "_recent",
        "_retired",
        "_shortest",
        "_size",
        "_totals",
    )

    def __init__(self, index: MemoryIndex) -> None:
        """*index* as it is now: the lists and columns it appends to later
        are cut at their length now, and what it replaces is copied."""
        self._index = index
        self._columns = index._table.columns()
        self._size = self._columns.size
        self._recent = {
            channel: (ordinals, len(ordinals)) for channel, ordinals in index._recent.items()
        }
        self._totals = dict(index._totals)
        self._codes = dict(index._codes)
        self._shortest = dict(index._shortest)
        self._retired = index._retired

    def __repr__(self) -> str:
        return f"MemoryView({self._size} notes)"

    def __len__(self) -> int:
        return self._size

    def totals(self, channel: str | None) -> tuple[int, int]:
        """Count and characters of the notes a run in *channel* may see."""
        return scoped_totals(self._totals, channel)

    def shortest(self, channel: str | None) -> int:
        """The fewest characters of id and text of a note a run in *channel*
        may see (retired ones included): a line needs at least that."""
        sizes = [self._shortest[c] for c in (None, channel) if c in self._shortest]
        return min(sizes, default=0)

    @property
    def index(self) -> MemoryIndex:
        return self._index

    def item(self, ordinal: int) -> MemoryItem:
        return self._index._items[ordinal]

    def ordinals_with_ids(self, ids: Iterable[str]) -> list[int]:
        """The ordinals in this view of the notes with each of *ids*, id by id."""
        size = self._size
        every = self._index._ids.every
        return [o for item_id in ids for o in every(item_id) if o < size]

    def written_by(self, run: str) -> list[MemoryItem]:
        """The notes run *run* wrote, in the order it wrote them."""
        items = self._index._items
        size = self._size
        return [items[o] for o in self._index._written.get(run, ()) if o < size]

    def with_ids(
        self, ids: Mapping[str, _V], channel: str | None
    ) -> list[tuple[int, MemoryItem, _V]]:
        """The notes a run in *channel* may see whose id is a key of *ids*,
        oldest first, each with its ordinal (``ranked`` takes it to leave the
        note out) and the value of its id."""
        items = self._index._items
        size = self._size
        scope = (None, channel)

        def seen_here(ordinal: int) -> bool:
            return ordinal < size and items[ordinal].channel in scope

        found = self._index._ids.having(ids, seen_here)
        return [(ordinal, items[ordinal], value) for ordinal, value in found]

    def ranking(
        self,
        message: str,
        channel: str | None,
        leave_out: Container[int] = frozenset(),
        context: Sequence[str] = (),
        unrelated_since: float | None = None,
    ) -> MemoryRanking:
        """The notes a run in *channel* may see, most relevant to *message*
        first. *leave_out* holds ordinals (from ``with_ids``) of notes to
        pass over; *context* the session's latest messages, oldest first,
        which a short message borrows terms from. With *unrelated_since*,
        the notes that share nothing with the message end the ranking only
        if written at that time or later."""
        channels = (None,) if channel is None else (None, channel)
        return MemoryRanking(self, message, channels, leave_out, context, unrelated_since)

    def ranked(
        self, message: str, channel: str | None, leave_out: Container[int] = frozenset()
    ) -> Iterator[MemoryItem]:
        """The notes of ``ranking``, without their scores."""
        return (ranked.item for ranked in self.ranking(message, channel, leave_out))

    def ranked_all(self, message: str) -> Iterator[MemoryItem]:
        """Every note, whatever its channel, most relevant to *message* first."""
        ranking = MemoryRanking(self, message, tuple(self._recent), frozenset(), (), None)
        return (ranked.item for ranked in ranking)


class MemoryRanking:
    """One message's ranking of a view: ``Ranked`` notes, best first,
    scored when first iterated; and why a note ranked where it did."""

    def __init__(
        self,
        view: MemoryView,
        message: str,
        channels: Collection[str | None],
        leave_out: Container[int],
        context: Sequence[str],
        unrelated_since: float | None,
    ) -> None:
        self._view = view
        self._channels = channels
        self._unrelated_since = unrelated_since
        self._leave_out = _EitherOf(leave_out, view._retired) if view._retired else leave_out
        # Each query term with the word it came from, and its weight.
        self.forms = term_forms(message)
        self.query: dict[str, float] = dict.fromkeys(self.forms, 1.0)
        if len(self.query) < SHORT_MESSAGE:
            for text in reversed(context[-CONTEXT_MESSAGES:]):
                for term, form in term_forms(text).items():
                    if term not in self.query:
                        self.query[term] = CONTEXT_WEIGHT
                        self.forms[term] = form
        self._scored: Scored | None = None

    def __repr__(self) -> str:
        return f"MemoryRanking({len(self.query)} terms over {self._view!r})"

    def __iter__(self) -> Iterator[Ranked]:
        view = self._view
        items = view._index._items
        leave_out = self._leave_out
        scored = self._score() if self.query and view._size else None
        if scored is not None:
            for ordered in _in_order(scored, view._columns, items):
                for ordinal, final, own in ordered:
                    if ordinal not in leave_out:
                        yield Ranked(ordinal, items[ordinal], final, own)
            candidates = set(scored.ordinals.tolist())
        else:
            candidates = set()
        # Then the rest, sharing nothing: newest first, and only back to
        # *unrelated_since* if given (a session's conversation already had
        # its chance at the older ones).
        recent = view._recent
        newest = [_newest_first(*recent[c]) for c in self._channels if c in recent]
        # One scope's notes are in walk order already: merged, each would
        # have its key built for nothing.
        walk = newest[0] if len(newest) == 1 else heapq.merge(*newest, key=view._index._key)
        since = self._unrelated_since
        for ordinal in walk:
            item = items[ordinal]
            if since is not None and item.created_at < since:
                return
            if ordinal not in candidates and ordinal not in leave_out:
                yield Ranked(ordinal, item, 0.0)

    def reasons(self, shown: Sequence[Ranked]) -> list[Reason]:
        """Why each of *shown* ranked where it did: the message's words it
        holds, the borrowed and feedback terms it holds, and the note beside
        it that lent it score (``None`` if none did)."""
        found: list[Reason] = [((), (), None)] * len(shown)
        scored = self._scored
        # A note that shares nothing with the message has nothing to show.
        ranked = [(n, r) for n, r in enumerate(shown) if r.score]
        if scored is None or not ranked:
            return found
        import numpy as np

        view = self._view
        # Each term with the word a reader knows it by.
        message = [(t, f) for t, f in self.forms.items() if self.query[t] == 1.0]
        borrowing = [(t, self.forms[t]) for t in self.query if self.query[t] != 1.0]
        borrowing += [(t, t) for t in sorted(scored.expansion)]
        ordinals = [r.ordinal for _, r in ranked]
        notes = np.asarray(ordinals, np.int64)
        # Which of the notes hold each term: from the postings the scoring
        # read, in one search; then a row per note, whose terms are picked
        # out in C rather than tested one by one.
        terms = [t for t, _ in message] + [t for t, _ in borrowing]
        hit = scored.holding(terms, notes)
        own_rows = hit[: len(message)].T.tolist()
        more_rows = hit[len(message) :].T.tolist()
        own_forms = [f for _, f in message]
        more_forms = [f for _, f in borrowing]
        # Where its own terms account for its whole score, no neighbour lent
        # any that counts.
        lenders = scored.lender[np.searchsorted(scored.ordinals, notes)].tolist()
        for (n, r), own, more, lender in zip(ranked, own_rows, more_rows, lenders, strict=True):
            lent = lender >= 0 and r.own < r.score - 1e-6
            found[n] = (
                tuple(compress(own_forms, own)),
                tuple(compress(more_forms, more)),
                view.item(lender).id if lent else None,
            )
        return found

    def _score(self) -> Scored:
        """The candidates' scores, computed when first asked for."""
        if self._scored is not None:
            return self._scored
        from ._scoring import in_scope, score

        view = self._view
        index = view._index
        codes = view._codes
        admitted = in_scope(len(codes), [codes[c] for c in self._channels if c in codes])
        items = index._items

        def feedback(ordinal: int) -> frozenset[str]:
            return held_terms(items[ordinal].text)

        self._scored = score(view._columns, index._postings, self.query, admitted, feedback)
        return self._scored


def _in_order(
    scored: Scored, columns: Columns, items: Sequence[MemoryItem]
) -> Iterator[Iterable[tuple[int, float, float]]]:
    """The candidates of *scored* by final score, then newest, then id, then
    ordinal, each with its score and own score: the best ``_HEAD`` in order,
    then, if the walk gets that far, the rest."""
    import numpy as np

    ordinals, final, own = scored.ordinals, scored.final, scored.own
    if len(ordinals) <= _HEAD:
        yield _ordered(ordinals, final, own, columns, items)
        return
    cut = np.partition(final, len(final) - _HEAD)[len(final) - _HEAD]
    head = final >= cut
    yield _ordered(ordinals[head], final[head], own[head], columns, items)
    rest = ~head
    yield _ordered(ordinals[rest], final[rest], own[rest], columns, items)


def _ordered(
    ordinals: Ints, final: Ints, own: Floats, columns: Columns, items: Sequence[MemoryItem]
) -> Iterable[tuple[int, float, float]]:
    """*ordinals* in walk order, each with its score and own score."""
    import numpy as np

    times = columns.created[ordinals]
    order = np.lexsort((ordinals, -times, -final))
    scores, times = final[order], times[order]
    # Millionths to a score: the division a float of them would get.
    ordered = zip(
        ordinals[order].tolist(), (scores / 1e6).tolist(), own[order].tolist(), strict=True
    )
    # Notes of equal score and time follow each other: found in one pass
    # over the order, so a turn's usual order, with none, is taken as it is.
    tied = np.flatnonzero((scores[1:] == scores[:-1]) & (times[1:] == times[:-1]))
    if not len(tied):
        return ordered
    entries = list(ordered)
    for start, end in _runs(tied.tolist()):
        entries[start:end] = sorted(
            entries[start:end], key=lambda entry: (items[entry[0]].id, entry[0])
        )
    return entries


def _runs(tied: list[int]) -> Iterator[tuple[int, int]]:
    """The runs of entries of equal keys, as slices, where *tied* holds,
    ascending, each entry equal to the one after it."""
    at = 0
    while at < len(tied):
        start = end = tied[at]
        while at + 1 < len(tied) and tied[at + 1] == end + 1:
            at += 1
            end += 1
        yield start, end + 2
        at += 1


class _EitherOf:
    """The ordinals in either of two containers."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: Container[int], second: Container[int]) -> None:
        self._first = first
        self._second = second

    def __contains__(self, ordinal: object) -> bool:
        return ordinal in self._first or ordinal in self._second


def _newest_first(ordinals: list[int], size: int) -> Iterator[int]:
    return (ordinals[at] for at in range(size - 1, -1, -1))


def memory_view(memory: MemoryView | Iterable[MemoryItem]) -> MemoryView:
    """*memory* as a view; plain items (tests, ``roster check``) are indexed here."""
    if isinstance(memory, MemoryView):
        return memory
    return MemoryIndex(memory).snapshot()


def rank_memory(items: Iterable[MemoryItem], message: str) -> list[MemoryItem]:
    """Most relevant first: score against *message*, then newest, then id.

    Equal keys keep their input order.
    """
    return list(memory_view(items).ranked_all(message))
