"""Ranking memory for the current message: relevance, recency, then id.

Relevance is the number of distinct words (three letters or more, any case)
an item shares with the message. Integer scores and an id tie-break keep the
order total and deterministic: the same items and message always rank the
same way.

A ``MemoryIndex`` holds one worker's notes with an inverted index (word to
the notes holding it) and, per channel, the notes in recency order. Ranking
a message then touches only the notes that share one of its words, plus as
many of the newest others as the caller takes: the ranking is a lazy
iterator, and the compiler stops taking once the memory block is full.

A small index (up to ``SCAN_LIMIT`` notes) also keeps each note's words
as a bitmask over the index's vocabulary, and all its notes in one recency
order. A view of few notes, or one whose notes hold the message's words
more often than it has notes (every note a candidate), is scanned instead:
each note's shared words are one ``&`` and ``bit_count``, and sorting the
recency walk by that count gives the same order as the heap (shared words,
then newest, then id).

A retired note stays in the index (its ordinal and postings do not move)
but never ranks again and no longer counts in the scope's totals: each
view holds the set of retired ordinals as of its snapshot.

The index is append-only: a ``MemoryView`` is a snapshot of its first *n*
notes, so later additions never change a compilation under way, and a view
may be read from a worker thread while the event loop adds notes (every
structure a view reads is either only appended to, with the view reading
below its snapshot length, or replaced whole, never edited in place).
"""

from __future__ import annotations

import heapq
import re
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping
from functools import reduce
from itertools import islice, repeat
from operator import itemgetter, or_
from typing import TypeVar

from ._inputs import MemoryItem, Retirement
from ._scoped import scoped_totals

__all__ = ("SCAN_LIMIT", "MemoryIndex", "MemoryView", "memory_view", "rank_memory", "words")

# Notes, and distinct words, an index keeps scan masks for: a word's bit
# and a note's mask are as wide as the vocabulary seen so far, so both
# bound their memory (about 1 MiB of bits, 512 masks of 512 bytes). Past
# either, the index only counts postings.
SCAN_LIMIT = 512
_SCAN_WORDS = 4_096
# An index this small is scanned whatever the message.
_ALWAYS_SCAN = 64
_WORD = re.compile(r"[^\W_]{3,}")
# ASCII letters lower-cased and digits kept, every other byte a space: the
# same runs as ``_WORD`` matches, short ones included.
_ASCII_WORDS = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256)
)
# Walk order of equally relevant notes: newest first, then id, then age.
_Key = tuple[float, str, int]
_V = TypeVar("_V")
_first = itemgetter(0)
# A place in the walk, below SCAN_LIMIT, fits in the low bits of a score.
_PLACE_BITS = (SCAN_LIMIT - 1).bit_length()
_PLACE_MASK = (1 << _PLACE_BITS) - 1


def words(text: str) -> set[str]:
    """The words ranking compares: three letters or more, lower-cased."""
    return set(_WORD.findall(text.lower()))


def _query_words(text: str) -> list[str]:
    """``words`` of a message, repeated as often as they occur and maybe with
    shorter runs: no note holds one, so they match nothing. ASCII (the usual
    message) skips the regex."""
    if text.isascii():
        return text.encode().translate(_ASCII_WORDS).decode().split()
    return _WORD.findall(text.lower())


class MemoryIndex:
    """One worker's notes, indexed by word and by recency per channel."""

    def __init__(
        self, items: Iterable[MemoryItem] = (), retirements: Iterable[Retirement] = ()
    ) -> None:
        self._items: list[MemoryItem] = []
        # Word to the ordinals of the notes holding it, ascending: the one
        # ordinal of a word only one note holds (most distinct words), an
        # array of 4-byte entries once a second note has it. No container
        # per word, so a note of many distinct words costs little memory
        # and leaves the garbage collector little to walk.
        self._postings: dict[str, int | array[int]] = {}
        # Sessions look up the notes they already showed by id; an id given
        # twice (plain inputs can repeat one) keeps its later ordinals aside.
        self._ids: dict[str, int] = {}
        self._more_ids: dict[str, list[int]] = {}
        # Each note's time by ordinal, side by side: ranking sorts the notes
        # sharing the message's words by it without reading a note.
        self._created: array[float] = array("d")
        # How many of the first notes were entered in walk order, each newer
        # than the one before (the usual: notes are added as they are
        # written); among those, a higher ordinal ranks first on recency.
        # It only grows, so a view reading it from a thread while notes are
        # added still finds its own notes' order right.
        self._ordered = 0
        # Per channel (None: worker-wide), ordinals in reverse walk order,
        # so the newest note, the usual addition, is an append.
        self._recent: dict[str | None, list[int]] = {}
        self._totals: dict[str | None, tuple[int, int]] = {}
        # While the index is small: a bit per word, how many notes hold
        # each word, every ordinal in reverse walk order
        # (whatever the channel) and, alongside, each note's words as a
        # mask of bits. Let go past SCAN_LIMIT notes or _SCAN_WORDS words
        # (views keep what they read).
        self._bits: dict[str, int] = {}
        self._held: dict[str, int] = {}
        self._walk: list[int] = []
        self._walk_masks: list[int] = []
        # Ordinals of retired notes, replaced whole on each retirement (a
        # view keeps the set it was made with), and each retirement by note id.
        self._retired: frozenset[int] = frozenset()
        self._retirements: dict[str, Retirement] = {}
        # Per run, the ordinals of the notes it wrote, in order: a session
        # holds its own notes in its conversation already.
        self._written: dict[str, list[int]] = {}
        for item in items:
            self._enter(item)
        # Entered in ordinal order: the masks by ordinal, until sorted.
        masks = self._walk_masks
        for ordinals in (*self._recent.values(), self._walk):
            ordinals.sort(key=self._key, reverse=True)
        self._walk_masks = list(map(masks.__getitem__, self._walk)) if self._walk else []
        for retirement in retirements:
            self.retire(retirement)

    def __repr__(self) -> str:
        return f"MemoryIndex({len(self._items)} notes, {len(self._postings)} words)"

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> tuple[MemoryItem, ...]:
        """Every note, oldest first."""
        return tuple(self._items)

    def live(self, item_id: str) -> MemoryItem | None:
        """The note *item_id*, unless there is none such or it is retired."""
        ordinal = self._ids.get(item_id)
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
        ordinals = [self._ids[item.id], *self._more_ids.get(item.id, ())]
        self._retired = self._retired.union(ordinals)
        self._retirements[item.id] = retirement
        for ordinal in ordinals:
            retired = self._items[ordinal]
            count, chars = self._totals[retired.channel]
            self._totals[retired.channel] = (count - 1, chars - len(retired.text))
        return True

    def add(self, item: MemoryItem) -> None:
        ordinal = self._enter(item)
        # Out of recency order (a clock that went back, equal times): new
        # lists, since views may be reading the old ones.
        recent = self._recent[item.channel]
        at = self._out_of_order(recent)
        if at is not None:
            self._recent[item.channel] = [*recent[:at], ordinal, *recent[at:]]
        scanned = len(self._walk) == len(self._items)
        if scanned and (at := self._out_of_order(self._walk)) is not None:
            mask = self._walk_masks.pop()
            self._walk = [*self._walk[:at], ordinal, *self._walk[at:]]
            self._walk_masks = [*self._walk_masks[:at], mask, *self._walk_masks[at:]]

    def snapshot(self) -> MemoryView:
        """The notes added so far, unaffected by later additions."""
        size = len(self._items)
        return MemoryView(
            self,
            size,
            {channel: (ordinals, len(ordinals)) for channel, ordinals in self._recent.items()},
            dict(self._totals),
            (self._walk, self._walk_masks, self._bits, self._held)
            if len(self._walk) == size
            else None,
            self._retired,
        )

    def _out_of_order(self, ordinals: list[int]) -> int | None:
        """If the ordinal just appended to *ordinals* breaks their reverse
        walk order, take it off and say where it belongs."""
        if len(ordinals) < 2 or self._key(ordinals[-2]) > self._key(ordinals[-1]):
            return None
        ordinal = ordinals.pop()
        return _insertion_point(ordinals, self._key(ordinal), self._key)

    def _enter(self, item: MemoryItem) -> int:
        ordinal = len(self._items)
        self._items.append(item)
        self._created.append(item.created_at)
        if ordinal == self._ordered and (
            not ordinal or self._key(ordinal) < self._key(ordinal - 1)
        ):
            self._ordered += 1
        if self._ids.setdefault(item.id, ordinal) != ordinal:
            self._more_ids.setdefault(item.id, []).append(ordinal)
        held = words(item.text)
        if len(self._walk) == ordinal < SCAN_LIMIT and len(self._bits) + len(held) <= _SCAN_WORDS:
            self._walk.append(ordinal)
            self._walk_masks.append(self._mask(held))
        elif self._bits or self._walk:
            self._bits, self._held, self._walk, self._walk_masks = {}, {}, [], []
        for word in held:
            postings = self._postings.get(word)
            if postings is None:
                self._postings[word] = ordinal
            elif isinstance(postings, int):
                self._postings[word] = array("I", (postings, ordinal))
            else:
                postings.append(ordinal)
        if item.run is not None:
            self._written.setdefault(item.run, []).append(ordinal)
        channel = item.channel
        self._recent.setdefault(channel, []).append(ordinal)
        count, chars = self._totals.get(channel, (0, 0))
        self._totals[channel] = (count + 1, chars + len(item.text))
        return ordinal

    def _mask(self, held: set[str]) -> int:
        bits, counts = self._bits, self._held
        mask = 0
        for word in held:
            bit = bits.get(word)
            if bit is None:
                bit = bits[word] = 1 << len(bits)
            mask |= bit
            counts[word] = counts.get(word, 0) + 1
        return mask

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

    __slots__ = ("_index", "_recent", "_retired", "_size", "_totals", "_walk")

    def __init__(
        self,
        index: MemoryIndex,
        size: int,
        recent: dict[str | None, tuple[list[int], int]],
        totals: dict[str | None, tuple[int, int]],
        walk: tuple[list[int], list[int], dict[str, int], dict[str, int]] | None,
        retired: frozenset[int] = frozenset(),
    ) -> None:
        self._index = index
        self._size = size
        self._recent = recent
        self._totals = totals
        # Every ordinal below size in reverse walk order, their masks, the
        # words' bits and how many notes hold each word, if the index keeps
        # them for all its notes.
        self._walk = walk
        self._retired = retired

    def __repr__(self) -> str:
        return f"MemoryView({self._size} notes)"

    def __len__(self) -> int:
        return self._size

    def totals(self, channel: str | None) -> tuple[int, int]:
        """Count and characters of the notes a run in *channel* may see."""
        return scoped_totals(self._totals, channel)

    @property
    def index(self) -> MemoryIndex:
        return self._index

    def item(self, ordinal: int) -> MemoryItem:
        return self._index._items[ordinal]

    def ordinals_with_id(self, item_id: str) -> list[int]:
        """The ordinals in this view of the notes with *item_id*."""
        index = self._index
        first = index._ids.get(item_id)
        if first is None or first >= self._size:
            return []
        more = index._more_ids.get(item_id)
        if more is None:  # the usual: an id given once
            return [first]
        return [first, *(o for o in more if o < self._size)]

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
        index = self._index
        first_ordinal = index._ids.get
        more = index._more_ids
        items = index._items
        size = self._size
        scope = (None, channel)
        found: list[tuple[int, MemoryItem, _V]] = []
        for item_id, value in ids.items():
            first = first_ordinal(item_id)
            if first is None:
                continue
            for ordinal in (first, *more[item_id]) if item_id in more else (first,):
                if ordinal < size and (item := items[ordinal]).channel in scope:
                    found.append((ordinal, item, value))
        # Ordinals are distinct: the sort never compares further.
        found.sort(key=_first)
        return found

    def ranked(
        self, message: str, channel: str | None, leave_out: Container[int] = frozenset()
    ) -> Iterator[MemoryItem]:
        """The notes a run in *channel* may see, most relevant to *message* first.

        *leave_out* holds ordinals (from ``with_ids``) of notes to pass over.
        """
        return self._ranked(message, (None,) if channel is None else (None, channel), leave_out)

    def ranked_all(self, message: str) -> Iterator[MemoryItem]:
        """Every note, whatever its channel, most relevant to *message* first."""
        return self._ranked(message, tuple(self._recent), frozenset())

    def _ranked(
        self, message: str, channels: Collection[str | None], leave_out: Container[int]
    ) -> Iterator[MemoryItem]:
        if self._retired:
            leave_out = _EitherOf(leave_out, self._retired)
        query = _query_words(message)
        # Scanning a note costs about what counting a posting does, and
        # walking the newest of the rest costs what scanning _ALWAYS_SCAN
        # notes does (repeated words count their postings again: a guess).
        scan = self._walk
        if scan is not None and (
            self._size <= _ALWAYS_SCAN or sum(map(scan[3].get, query, repeat(0))) > self._size
        ):
            bits = reduce(or_, map(scan[2].get, query, repeat(0)), 0)
            return self._scanned(scan[0], scan[1], bits, channels, leave_out)
        return self._counted(set(query), channels, leave_out)

    def _scanned(
        self,
        walk: list[int],
        masks: list[int],
        query: int,
        channels: Collection[str | None],
        leave_out: Container[int],
    ) -> Iterator[MemoryItem]:
        size = self._size
        # Shared words, then place in the walk, newest (last) first, in one
        # int per note; every note is scored, the taker's few are filtered.
        scores = [
            (mask & query).bit_count() << _PLACE_BITS | place
            for place, mask in enumerate(islice(masks, size))
        ]
        scores.sort(reverse=True)
        items = self._index._items
        for score in scores:
            ordinal = walk[score & _PLACE_MASK]
            item = items[ordinal]
            if item.channel in channels and ordinal not in leave_out:
                yield item

    def _counted(
        self, query: set[str], channels: Collection[str | None], leave_out: Container[int]
    ) -> Iterator[MemoryItem]:
        index = self._index
        items = index._items
        size = self._size
        shared: Counter[int] = Counter()
        for word in query:
            postings = index._postings.get(word)
            if isinstance(postings, int):
                if postings < size:
                    shared[postings] += 1
            elif postings is not None:
                shared.update(islice(postings, bisect_left(postings, size)))
        # Most shared words, then newest: stable sorts keyed by C-level
        # lookups, no note read; a note is read only once it is reached.
        # Notes entered in walk order need no look at their times at all
        # (each is a cache miss at 100,000 notes, and there are hundreds).
        in_order = size <= index._ordered
        by_time = None if in_order else index._created.__getitem__
        ordinals = sorted(shared, key=by_time, reverse=True)
        ordinals.sort(key=shared.__getitem__, reverse=True)
        walk = ordinals if in_order else _ties_by_id(ordinals, shared, index._created, items)
        for ordinal in walk:
            if ordinal not in leave_out and items[ordinal].channel in channels:
                yield items[ordinal]
        # Then the rest, sharing nothing: newest first.
        newest = [_newest_first(*self._recent[c]) for c in channels if c in self._recent]
        for ordinal in heapq.merge(*newest, key=index._key):
            if ordinal not in shared and ordinal not in leave_out:
                yield items[ordinal]


class _EitherOf:
    """The ordinals in either of two containers."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: Container[int], second: Container[int]) -> None:
        self._first = first
        self._second = second

    def __contains__(self, ordinal: object) -> bool:
        return ordinal in self._first or ordinal in self._second


def _ties_by_id(
    ordinals: list[int], shared: Mapping[int, int], created: array[float], items: list[MemoryItem]
) -> Iterator[int]:
    """*ordinals*, sorted by shared words then time, with each run of equal
    (shared, time) put in (id, ordinal) order: the ranking's full key."""
    end = len(ordinals)
    at = 0
    while at < end:
        ordinal = ordinals[at]
        count, time = shared[ordinal], created[ordinal]
        tied = at + 1
        while tied < end and created[ordinals[tied]] == time and shared[ordinals[tied]] == count:
            tied += 1
        if tied == at + 1:
            yield ordinal
        else:
            yield from sorted(ordinals[at:tied], key=lambda o: (items[o].id, o))
        at = tied


def _newest_first(ordinals: list[int], size: int) -> Iterator[int]:
    return (ordinals[at] for at in range(size - 1, -1, -1))


def memory_view(memory: MemoryView | Iterable[MemoryItem]) -> MemoryView:
    """*memory* as a view; plain items (tests, ``roster check``) are indexed here."""
    if isinstance(memory, MemoryView):
        return memory
    return MemoryIndex(memory).snapshot()


def rank_memory(items: Iterable[MemoryItem], message: str) -> list[MemoryItem]:
    """Most relevant first: shared words with *message*, then newest, then id.

    Equal keys keep their input order, as a stable sort would.
    """
    return list(memory_view(items).ranked_all(message))
