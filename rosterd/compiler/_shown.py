"""What a session's conversation already holds, left out of the next turn.

Every memory item and gate a turn sends is one envelope line. A session keeps,
per id, the sha256 of that line and the turn that sent it (``ShownItems``); a
later turn leaves the item out while it would render the same line again. An
item whose text changed, or a gate since resolved, renders a different line
and is sent again. ``shown_in`` reads those lines back out of an input the
compiler produced, so a session can rebuild what it showed from its
transcript.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Literal

import msgspec

from ._blocks import gate_line, memory_line
from ._gates import GateView
from ._items import Gate, MemoryItem, Shown
from ._memory import MemoryView
from ._trace import AlreadyShown, sha256_text

ShownKind = Literal["memory", "gate"]

# Envelopes render their tag first, so a line's block is known from its start.
_MEMORY = '{"block":"memory",'
_BRIEFING = '{"block":"briefing",'
# Only these briefing kinds stand for one gate; "omitted" counts gates not sent.
_GATE_KINDS = frozenset({"gate", "resolved"})


class _MemoryLine(msgspec.Struct):
    id: str


class _BriefingLine(msgspec.Struct):
    kind: str
    gate: str | None = None


_memory_line = msgspec.json.Decoder(_MemoryLine)
_briefing_line = msgspec.json.Decoder(_BriefingLine)


@lru_cache(maxsize=4096)
def line_sha256(line: str) -> str:
    # ``shown_in`` hashes the lines a turn sent; the next turn's memo asks
    # for the same lines again (rendered anew, equal): a lookup, not a hash.
    return sha256_text(line)


@lru_cache(maxsize=4096)
def _memory_sha256(item_id: str, text: str) -> str:
    # Every turn checks every item already shown: the same texts each turn,
    # so this is a cache hit, not a render.
    return line_sha256(memory_line(item_id, text))


def held_note(item: MemoryItem, turn: int) -> Shown:
    """A note the session wrote itself in *turn*, as if its line had been
    sent then: the conversation holds the call that wrote it."""
    return Shown(sha256=_memory_sha256(item.id, item.text), turn=turn)


class ShownItems(msgspec.Struct, frozen=True):
    """What a session's conversation already holds, by memory item id and
    by gate id.

    A session's ledger also passes ``log``, every (kind, id) it noted in
    order, and a ``memo`` of what its previous turn found held, so a turn
    looks only at what changed since.
    """

    memory: Mapping[str, Shown]
    gates: Mapping[str, Shown]
    log: Sequence[tuple[str, str]] = ()
    memo: HeldMemo | None = None


class Held(msgspec.Struct, frozen=True):
    """Of the items in scope, those the conversation holds: the ordinals to
    leave out of the view's walk, how many they are, their trace entries
    and raw characters.

    The trace entries are all of them in ``known``, or, where ``newly`` is
    set, only what changed since what the ledger's memo last saw traced:
    ``newly`` the entries it did not hold then (or held since another
    turn), ``gone`` the ids it held then and no longer does."""

    ordinals: Container[int] = frozenset()
    known: tuple[AlreadyShown, ...] = ()
    raw_chars: int = 0
    # From a ledger's memo: the held items' places in the trace, sorted
    # (briefing order for gates), so a briefing skips the held gates it
    # starts with at once instead of walking past each (a session holds
    # more of them every turn).
    order: tuple[tuple[float, str, int], ...] = ()
    count: int = 0
    newly: tuple[AlreadyShown, ...] | None = None
    gone: tuple[str, ...] = ()


class _Held:
    """What one kind of item a ledger holds, as of one view of one index.

    Only gates keep their held items' places in the trace sorted as they
    go (*ordered*): a briefing reads them every turn. Notes are listed by
    ordinal, sorted only when a trace lists them all."""

    def __init__(self, index: object, channel: str | None, *, ordered: bool) -> None:
        self.index = index
        self.channel = channel
        self.ordered = ordered
        self.added = 0  # items of the index looked at
        self.removals = 0  # removals from the index looked at (gates)
        self.logged = 0  # ledger entries looked at
        # Trace entries and raw characters by ordinal; if *ordered*, the held
        # items' places in the trace (briefing order), kept sorted, with their
        # trace entries alongside: a turn's are one copy of that list.
        self.known: dict[int, AlreadyShown] = {}
        self.sizes: dict[int, int] = {}
        self.order: list[tuple[float, str, int]] = []
        self.traced: list[AlreadyShown] = []
        self.chars = 0
        # What the last traced compilation held (``None`` before one was),
        # and the ordinals looked at since: a compilation's trace says only
        # how those differ, until one is durable (``commit``). Items held
        # outside the index (resolved gates the conversation has with their
        # outcome: a few, only while resolved since the previous turn) are
        # compared whole, as the last result had them.
        self.committed: dict[int, AlreadyShown] | None = None
        self.touched: set[int] = set()
        self.outside: tuple[AlreadyShown, ...] = ()
        self.committed_outside: dict[str, AlreadyShown] = {}

    def follows(self, index: object, channel: str | None, added: int, removals: int) -> bool:
        """Whether a view of *index* with these counts comes after this state."""
        return (
            self.index is index
            and self.channel == channel
            and added >= self.added
            and removals >= self.removals
        )

    def noted(self, log: Sequence[tuple[str, str]], kind: str) -> list[str]:
        """The ids of *kind* the ledger noted since this state last looked."""
        return [item_id for noted, item_id in log[self.logged :] if noted == kind]

    def put(
        self, order: tuple[float, str, int], item_id: str, before: Shown | None, chars: int
    ) -> None:
        """Record whether the item at ordinal ``order[2]`` is held (*before*
        given) or not; *order* is its place in the trace."""
        ordinal = order[2]
        self.touched.add(ordinal)
        if ordinal in self.known:
            self.drop(order)
        if before is not None:
            entry = self.known[ordinal] = AlreadyShown(id=item_id, since=before.turn)
            self.sizes[ordinal] = chars
            self.chars += chars
            if self.ordered:
                at = bisect_left(self.order, order)
                self.order.insert(at, order)
                self.traced.insert(at, entry)

    def drop(self, order: tuple[float, str, int]) -> None:
        ordinal = order[2]
        self.touched.add(ordinal)
        if ordinal in self.known:
            del self.known[ordinal]
            self.chars -= self.sizes.pop(ordinal)
            if self.ordered:
                at = bisect_left(self.order, order)
                del self.order[at]
                del self.traced[at]

    def result(self, outside: tuple[AlreadyShown, ...] = ()) -> Held:
        """What is held, with the items held *outside* the index first;
        once a compilation of it was traced, only what changed since (see
        ``Held``)."""
        self.outside = outside
        count = len(self.known) + len(outside)
        order = tuple(self.order)
        if self.committed is None:
            known = self.known
            traced = self.traced if self.ordered else [known[o] for o in sorted(known)]
            return Held(known.keys(), (*outside, *traced), self.chars, order, count)
        newly = [item for item in outside if self.committed_outside.get(item.id) != item]
        still = {item.id for item in outside}
        gone = [item_id for item_id in self.committed_outside if item_id not in still]
        for ordinal in sorted(self.touched):
            now, then = self.known.get(ordinal), self.committed.get(ordinal)
            if now == then:
                continue
            if then is not None:
                gone.append(then.id)
            if now is not None:
                newly.append(now)
        return Held(self.known.keys(), (), self.chars, order, count, tuple(newly), tuple(gone))

    def commit(self) -> None:
        """The compilation ``result`` last answered is traced, durably."""
        if self.committed is None:
            self.committed = dict(self.known)
        else:
            for ordinal in self.touched:
                if ordinal in self.known:
                    self.committed[ordinal] = self.known[ordinal]
                else:
                    self.committed.pop(ordinal, None)
        self.committed_outside = {item.id: item for item in self.outside}
        self.touched.clear()


class HeldMemo:
    """A session's held items, carried from one compilation to the next.

    Recomputing which ledger entries still match the store on every turn
    costs what the session has shown so far; with the memo a turn looks only
    at ledger entries noted, and store items added or gates resolved, since
    the previous turn. It starts afresh whenever the views come from another
    index or channel, or are older than the last (plain inputs always are).
    A memo is read and written by one compilation at a time: a session's.

    Once the session says a compilation is traced (``traced``), the next
    one's memory and briefing blocks say only what changed since that one
    in the items held: a session's trace then grows by what each turn
    changes, not by all it ever showed. Until then, each says what changed
    since the last traced one (or, afresh, all of them), so a compilation
    thrown away (a turn that found its reads stale) loses nothing from the
    trace.
    """

    def __init__(self) -> None:
        self._memory: _Held | None = None
        self._gates: _Held | None = None

    def __repr__(self) -> str:
        memory, gates = (len(state.known) if state else 0 for state in self._states())
        return f"HeldMemo({memory} memory items, {gates} gates)"

    def traced(self) -> None:
        """The session's last compilation is in its trace, durably: the
        next one's blocks say only what changed since."""
        for state in self._states():
            if state is not None:
                state.commit()

    def retrace(self) -> None:
        """The run's last record is not the last one traced here (another
        host's, say): the next blocks list every held item again."""
        for state in self._states():
            if state is not None:
                state.committed = None

    def _states(self) -> tuple[_Held | None, _Held | None]:
        return self._memory, self._gates

    def memory(self, view: MemoryView, channel: str | None, shown: ShownItems) -> Held:
        state = self._memory
        if state is None or not state.follows(view.index, channel, len(view), 0):
            state = self._memory = _Held(view.index, channel, ordered=False)
        scope = (None, channel)
        table = shown.memory

        def look(ordinal: int) -> None:
            item = view.item(ordinal)
            before = table.get(item.id)
            if before is not None and (
                item.channel not in scope or before.sha256 != _memory_sha256(item.id, item.text)
            ):
                before = None
            state.put((0.0, "", ordinal), item.id, before, len(item.text))

        if state.added == 0 and state.logged == 0:
            # From scratch: the ledger's ids, not every item of the store.
            for ordinal, _, _ in view.with_ids(table, channel):
                look(ordinal)
        else:
            for ordinal in view.ordinals_with_ids(state.noted(shown.log, "memory")):
                look(ordinal)
            for ordinal in range(state.added, len(view)):
                if view.item(ordinal).id in table:
                    look(ordinal)
        state.added, state.logged = len(view), len(shown.log)
        return state.result()

    def gates(
        self,
        view: GateView,
        channel: str | None,
        shown: ShownItems,
        resolved: tuple[AlreadyShown, ...],
    ) -> Held:
        state = self._gates
        if state is None or not state.follows(view.index, channel, view.added, view.removals):
            state = self._gates = _Held(view.index, channel, ordered=True)
        table = shown.gates

        def look(entry: tuple[float, str, int, Gate]) -> None:
            gate = entry[3]
            before = table.get(gate.id)
            if before is not None and (
                not view.holds(entry, channel)
                or before.sha256 != _open_gate_sha256(gate.id, gate.summary)
            ):
                before = None
            state.put(entry[:3], gate.id, before, len(gate.summary) + len(gate.note))

        if state.added == 0 and state.logged == 0:
            for gate_id in table:
                for entry in view.entries_with_id(gate_id):
                    look(entry)
        else:
            for gate_id in state.noted(shown.log, "gate"):
                for entry in view.entries_with_id(gate_id):
                    look(entry)
            for entry in view.added_since(state.added):
                if entry[1] in table:
                    look(entry)
            for ordinal in view.removed_since(state.removals):
                state.drop(view.order_of(ordinal))
        state.added, state.removals, state.logged = view.added, view.removals, len(shown.log)
        return state.result(resolved)


def held_memory(memory: MemoryView, channel: str | None, shown: ShownItems) -> Held:
    """The notes in scope whose line the conversation already holds.

    Only the notes the ledger names are looked at: the cost follows what the
    session showed, not what the worker ever wrote; with the ledger's memo,
    only what changed since its previous turn.
    """
    if shown.memo is not None:
        return shown.memo.memory(memory, channel, shown)
    return _held(
        (ordinal, item.id, before, _memory_sha256(item.id, item.text), len(item.text))
        for ordinal, item, before in memory.with_ids(shown.memory, channel)
    )


def held_gates(
    gates: GateView, channel: str | None, shown: ShownItems, resolved: tuple[AlreadyShown, ...]
) -> Held:
    """The open gates in scope whose line the conversation already holds,
    after the *resolved* ones it holds with their outcome (``unshown_gates``
    finds those: they are only the gates resolved since the previous turn)."""
    if shown.memo is not None:
        return shown.memo.gates(gates, channel, shown, resolved)
    candidates = (
        (
            ordinal,
            gate.id,
            before,
            _open_gate_sha256(gate.id, gate.summary),
            len(gate.summary) + len(gate.note),
        )
        for ordinal, gate, before in gates.open_with_ids(shown.gates, channel)
    )
    return _held(candidates, resolved)


def _held(
    candidates: Iterable[tuple[int, str, Shown, str, int]],
    outside: tuple[AlreadyShown, ...] = (),
) -> Held:
    """Of (ordinal, id, ledger entry, sha256 of the line now, raw characters),
    the items whose line is still the one the ledger noted, after the items
    held *outside* the index."""
    ordinals: list[int] = []
    known: list[AlreadyShown] = [*outside]
    chars = 0
    for ordinal, item_id, before, sha256, size in candidates:
        if before.sha256 == sha256:
            ordinals.append(ordinal)
            known.append(AlreadyShown(id=item_id, since=before.turn))
            chars += size
    return Held(frozenset(ordinals), tuple(known), chars, count=len(known))


@lru_cache(maxsize=4096)
def _gate_sha256(line: str) -> str:
    # The lines are the compiler's cached ones, the same objects every turn.
    return line_sha256(line)


@lru_cache(maxsize=4096)
def _open_gate_sha256(gate_id: str, summary: str) -> str:
    return line_sha256(gate_line(gate_id, summary, None, ""))


def unshown_gates(
    gates: Sequence[Gate], lines: Sequence[str], shown: Mapping[str, Shown]
) -> tuple[list[Gate], list[str], tuple[AlreadyShown, ...]]:
    """Of gates and their rendered lines, those not yet sent, and those left out."""
    fresh: list[Gate] = []
    fresh_lines: list[str] = []
    known: list[AlreadyShown] = []
    for gate, line in zip(gates, lines, strict=True):
        before = shown.get(gate.id)
        if before is not None and before.sha256 == _gate_sha256(line):
            known.append(AlreadyShown(id=gate.id, since=before.turn))
        else:
            fresh.append(gate)
            fresh_lines.append(line)
    return fresh, fresh_lines, tuple(known)


def shown_in(input_text: str) -> Iterator[tuple[ShownKind, str, str]]:
    """The memory items and gates an input sent: kind, id, line sha256."""
    for line in input_text.splitlines(keepends=True):
        if line.startswith(_MEMORY):
            yield "memory", _memory_line.decode(line).id, line_sha256(line)
        elif line.startswith(_BRIEFING):
            briefing = _briefing_line.decode(line)
            if briefing.kind in _GATE_KINDS and briefing.gate is not None:
                yield "gate", briefing.gate, line_sha256(line)
