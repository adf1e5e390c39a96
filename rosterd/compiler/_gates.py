"""Open gates of one worker, per channel, in briefing order.

The briefing shows the oldest open gates that fit and counts the rest, so a
``GateIndex`` keeps them sorted (filed, then id) with running totals: a
compilation reads only the gates it shows. A ``GateView`` is a snapshot that
a worker thread may read while the event loop files and resolves gates: a
list is appended to in place only past every view's end, and otherwise
replaced whole.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, insort
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TypeVar

from ._items import Gate
from ._scoped import ById, scoped_totals

# Briefing order; the ordinal keeps equal (filed, id) pairs in arrival order.
_Entry = tuple[float, str, int, Gate]
_V = TypeVar("_V")


class GateIndex:
    """The open gates of *worker*, filed for a channel or worker-wide (``None``)."""

    def __init__(self, worker: str, gates: Iterable[Gate] = ()) -> None:
        self.worker = worker
        self._open: dict[str | None, list[_Entry]] = {}
        self._totals: dict[str | None, tuple[int, int]] = {}
        self._entries: dict[str, _Entry] = {}
        # Every gate ever added, by id, for sessions to find those they showed.
        self._filed: ById[_Entry] = ById()
        # Every entry by ordinal, and the ordinals removed, in order: what
        # changed between two snapshots, for a session's ledger to catch up.
        self._added: list[_Entry] = []
        self._removed: array[int] = array("I")
        for gate in gates:
            self.add(gate)

    def __repr__(self) -> str:
        return f"GateIndex({self.worker!r}, {len(self._entries)} open)"

    def add(self, gate: Gate) -> None:
        entry = (gate.filed_at, gate.id, len(self._added), gate)
        self._added.append(entry)
        self._entries[gate.id] = entry
        self._filed.add(gate.id, entry)
        entries = self._open.setdefault(gate.channel, [])
        if not entries or entries[-1] < entry:
            entries.append(entry)
        else:
            copy = list(entries)
            insort(copy, entry)
            self._open[gate.channel] = copy
        self._count(gate, 1)

    def remove(self, gate_id: str) -> None:
        entry = self._entries.pop(gate_id)
        gate = entry[3]
        entries = self._open[gate.channel]
        at = bisect_left(entries, entry)
        self._open[gate.channel] = [*entries[:at], *entries[at + 1 :]]
        self._removed.append(entry[2])
        self._count(gate, -1)

    def snapshot(self, resolved: Iterable[Gate] = ()) -> GateView:
        """Open gates now, plus *resolved* ones to show once with their outcome."""
        return GateView(
            self,
            {channel: (entries, len(entries)) for channel, entries in self._open.items()},
            dict(self._totals),
            tuple(resolved),
        )

    def _count(self, gate: Gate, sign: int) -> None:
        count, chars = self._totals.get(gate.channel, (0, 0))
        self._totals[gate.channel] = (count + sign, chars + sign * _raw_chars(gate))


def _raw_chars(gate: Gate) -> int:
    return len(gate.summary) + len(gate.outcome or "") + len(gate.note)


class GateView:
    """What one compilation may brief: a snapshot of a ``GateIndex``."""

    __slots__ = ("_index", "_open", "_totals", "added", "removals", "resolved", "worker")

    def __init__(
        self,
        index: GateIndex,
        open_gates: dict[str | None, tuple[list[_Entry], int]],
        totals: dict[str | None, tuple[int, int]],
        resolved: tuple[Gate, ...],
    ) -> None:
        self.worker = index.worker
        self._index = index
        # How many gates were ever added to, and removed from, the index.
        self.added = len(index._added)
        self.removals = len(index._removed)
        self._open = open_gates
        self._totals = totals
        self.resolved = resolved

    def __repr__(self) -> str:
        return f"GateView({self.worker!r}, {len(self.resolved)} resolved)"

    def totals(self, channel: str | None) -> tuple[int, int]:
        """Count and raw characters of the open gates a run in *channel* sees."""
        return scoped_totals(self._totals, channel)

    def open_with_ids(
        self, ids: Mapping[str, _V], channel: str | None
    ) -> list[tuple[int, Gate, _V]]:
        """The open gates a run in *channel* sees whose id is a key of *ids*,
        oldest first, each with its ordinal (``open`` takes it to leave the
        gate out) and the value of its id."""
        found = self._index._filed.having(ids, lambda entry: self.holds(entry, channel))
        return [(entry[2], entry[3], value) for entry, value in found]

    def open(
        self,
        channel: str | None,
        leave_out: Container[int] = frozenset(),
        held: Sequence[tuple[float, str, int]] = (),
    ) -> Iterator[Gate]:
        """Open gates a run in *channel* sees, oldest first, but those in *leave_out*.

        *held*, if given, holds the briefing-order keys of the gates in
        *leave_out* (each open in this view and seen from *channel*), sorted:
        the gates they cover from the start are skipped at once.
        """
        empty: tuple[list[_Entry], int] = ([], 0)
        shared, shared_size = self._open.get(None, empty)
        own, own_size = self._open.get(channel, empty) if channel is not None else empty
        # Two sorted lists: merged here, without heapq.merge's setup per call.
        i, j = _held_start(held, shared, shared_size, own, own_size)
        while i < shared_size and j < own_size:
            if shared[i] < own[j]:
                entry = shared[i]
                i += 1
            else:
                entry = own[j]
                j += 1
            if entry[2] not in leave_out:
                yield entry[3]
        for entries, at, size in ((shared, i, shared_size), (own, j, own_size)):
            for entry in islice(entries, at, size):
                if entry[2] not in leave_out:
                    yield entry[3]

    def entries_with_id(self, gate_id: str) -> list[_Entry]:
        """Every entry ever added with *gate_id*, open in this view or not."""
        return self._index._filed.every(gate_id)

    def added_since(self, added: int) -> list[_Entry]:
        """The entries added after the first *added*, up to this view."""
        return self._index._added[added : self.added]

    def order_of(self, ordinal: int) -> tuple[float, str, int]:
        """The briefing-order key of the entry at *ordinal*."""
        entry = self._index._added[ordinal]
        return entry[0], entry[1], entry[2]

    def removed_since(self, removals: int) -> array[int]:
        """Ordinals removed after the first *removals*, up to this view."""
        return self._index._removed[removals : self.removals]

    @property
    def index(self) -> GateIndex:
        return self._index

    def holds(self, entry: _Entry, channel: str | None) -> bool:
        """Whether *entry* is open in this snapshot and seen from *channel*."""
        filed_for = entry[3].channel
        if filed_for not in (None, channel) or filed_for not in self._open:
            return False
        entries, size = self._open[filed_for]
        at = bisect_left(entries, entry, 0, size)
        return at < size and entries[at] is entry


def _held_start(
    held: Sequence[tuple[float, str, int]],
    shared: list[_Entry],
    shared_size: int,
    own: list[_Entry],
    own_size: int,
) -> tuple[int, int]:
    """Where the walk of two sorted lists starts past the longest run of
    their first entries that are all *held*: (shared, own) positions.

    *held* is a sorted subset of the lists' entries' keys, so its first *p*
    are the walk's first *p* exactly when *p* entries come at or before the
    *p*-th of them; a binary search finds the largest such *p*.
    """

    def at_or_before(key: tuple[float, str, int]) -> tuple[int, int]:
        # An entry (filed, id, ordinal, gate) sorts below the 3-tuple bound
        # exactly when its ordinal is at most the key's.
        bound = (key[0], key[1], key[2] + 1)
        return bisect_left(shared, bound, 0, shared_size), bisect_left(own, bound, 0, own_size)

    low, high = 0, len(held)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(at_or_before(held[middle - 1])) == middle:
            low = middle
        else:
            high = middle - 1
    return at_or_before(held[low - 1]) if low else (0, 0)


def gate_view(gates: GateView | Iterable[Gate], worker: str) -> GateView:
    """*gates* as a view for *worker*; plain gates (tests, ``roster check``) are indexed here."""
    if isinstance(gates, GateView):
        return gates if gates.worker == worker else GateIndex(worker).snapshot()
    mine = [g for g in gates if g.worker == worker]
    index = GateIndex(worker, (g for g in mine if g.outcome is None))
    return index.snapshot(g for g in mine if g.outcome is not None)
