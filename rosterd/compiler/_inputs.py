"""The fresh input of one run or turn, as the compiler takes it: what the
stores hold (plain items, or their indexed snapshots) and what a session
adds (history, backlog, what its conversation already holds).
"""

from __future__ import annotations

import msgspec

from ._gates import GateView
from ._items import ChannelMessage, Continuation, Gate, MemoryItem
from ._memory import MemoryView
from ._shown import ShownItems


class TurnInput(msgspec.Struct, frozen=True):
    """The fresh input of one run or turn.

    ``history`` is ``None`` except on the first turn of a fresh session, when
    it holds the channel's recent messages snapshotted at wake. ``backlog``
    holds what others posted in the channel since the session last looked,
    oldest first; ``backlog_omitted`` counts older ones not even passed.
    ``shown`` is ``None`` outside sessions: a task or direct run is one
    compilation, and everything in scope is new to it. ``memory`` and
    ``gates`` are plain items or the stores' indexed snapshots, which let a
    compilation read only what it can show. ``recent`` holds a session's
    latest messages before this one, oldest first: memory ranking borrows
    their terms when the message is short. ``previous_turn_at`` is when a
    session's previous turn was sent (``None`` on its first turn, and
    outside sessions): past its first turn, a session's memory block takes
    notes that share nothing with the message only if they were written
    since then.
    """

    text: str
    sender: str = "operator"
    memory: tuple[MemoryItem, ...] | MemoryView = ()
    gates: tuple[Gate, ...] | GateView = ()
    continuation: Continuation | None = None
    history: tuple[ChannelMessage, ...] | None = None
    shown: ShownItems | None = None
    backlog: tuple[ChannelMessage, ...] = ()
    backlog_omitted: int = 0
    recent: tuple[str, ...] = ()
    previous_turn_at: float | None = None
