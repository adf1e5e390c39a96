"""Which memory items and gates a session's conversation already holds.

A session owns one ledger. It is rebuilt from the transcript when the session
resumes (the user entries hold the compiled input exactly as sent) and kept
up to date from each turn's input once it is in the transcript, so what the
compiler leaves out is always something the engine has been or will be sent.
A new session, rolled over or not, starts with an empty ledger.

A note the session wrote itself (``remember``) counts as shown from the turn
that wrote it: the conversation holds the call. Those come from the memory
store, which names each note's run, so a resumed session holds them too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import MappingProxyType

from ..compiler import HeldMemo, MemoryItem, Shown, ShownItems, ShownKind, held_note, shown_in
from ..protocol import ChatMessage, TranscriptEntry


class ShownLedger:
    """Per memory item and gate id: the line last sent and the turn that sent it."""

    def __init__(self) -> None:
        self._memory: dict[str, Shown] = {}
        self._gates: dict[str, Shown] = {}
        self._log: list[tuple[ShownKind, str]] = []
        # How many of the notes the session wrote are noted already.
        self._written = 0
        # Read-only views: a turn's input borrows them instead of copying.
        # The log and memo let a turn look only at what changed since the last.
        self._memo = HeldMemo()
        # The turn of the compilation last traced from this ledger's memo.
        self._traced_turn: int | None = None
        self._view = ShownItems(
            memory=MappingProxyType(self._memory),
            gates=MappingProxyType(self._gates),
            log=self._log,
            memo=self._memo,
        )

    def __repr__(self) -> str:
        return f"ShownLedger({len(self._memory)} memory items, {len(self._gates)} gates)"

    @classmethod
    def from_entries(cls, entries: Iterable[TranscriptEntry]) -> ShownLedger:
        """The ledger of a resumed session, read once from its transcript."""
        ledger = cls()
        for entry in entries:
            if entry.role == "user":
                ledger.note(entry.turn, entry.content)
        return ledger

    def items(self) -> ShownItems:
        """What the conversation holds, as a live read-only view."""
        return self._view

    def traced(self, turn: int) -> None:
        """Turn *turn*'s compilation of the items is in the session's
        trace, durably: the next one's trace says what changed since."""
        self._memo.traced()
        self._traced_turn = turn

    def going_on(self, turn: int) -> None:
        """Before compiling turn *turn*: its trace says only what changed
        if the run's previous record is the last one traced here, else
        (another host took the turns between, or a turn failed) it lists
        every held item again."""
        if self._traced_turn != turn - 1:
            self._memo.retrace()

    def note(self, turn: int, input_text: str) -> None:
        """Record what a user turn that reached the transcript sent."""
        for kind, item_id, sha256 in shown_in(input_text):
            table = self._memory if kind == "memory" else self._gates
            table[item_id] = Shown(sha256=sha256, turn=turn)
            self._log.append((kind, item_id))

    def note_written(self, notes: Sequence[MemoryItem]) -> None:
        """Hold the notes the session wrote, all of them so far, in order."""
        for item in notes[self._written :]:
            self._memory[item.id] = held_note(item, item.turn or 0)
            self._log.append(("memory", item.id))
        self._written = len(notes)

    def note_sent(self, turn: int, messages: Iterable[ChatMessage]) -> None:
        """``note`` for each user message appended to a transcript by *turn*."""
        for message in messages:
            if message.role == "user":
                self.note(turn, message.content)
