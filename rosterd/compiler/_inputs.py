"""What the compiler reads besides the org: store data and host run metadata.

The stores hand these over already loaded; the compiler filters them by the
run's scope itself, so selection never depends on text inside a message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import msgspec

if TYPE_CHECKING:
    from ._gates import GateView
    from ._memory import MemoryView
    from ._shown import HeldMemo

__all__ = (
    "ChannelMessage",
    "Continuation",
    "Gate",
    "MemoryItem",
    "NoteAuthor",
    "Retirement",
    "RunMeta",
    "Shown",
    "ShownItems",
    "TurnInput",
)


# Who wrote a note or retired one: an operator (``memory.add``,
# ``memory.forget``) or the worker itself, through its memory tools.
NoteAuthor = Literal["operator", "worker"]


class MemoryItem(msgspec.Struct, frozen=True):
    """An advisory note of a worker; ``channel=None`` means worker-wide.

    A note the worker wrote names the run and turn that wrote it; notes
    from before notes had authors read as an operator's.
    """

    id: str
    text: str
    created_at: float
    channel: str | None = None
    author: NoteAuthor = "operator"
    run: str | None = None
    turn: int | None = None


class Retirement(msgspec.Struct, frozen=True):
    """Note ``note`` of a worker retired: it never ranks again. Appended,
    never rewritten; a worker's names the run and turn that retired it."""

    note: str
    because: str
    at: float
    author: NoteAuthor = "operator"
    run: str | None = None
    turn: int | None = None


class Gate(msgspec.Struct, frozen=True):
    """A question a worker waits on, filed for a channel or worker-wide.

    Open gates have no ``outcome``; a gate resolved since a session's last
    turn is passed with its outcome, so the next briefing shows it once.
    """

    id: str
    worker: str
    summary: str
    filed_at: float
    channel: str | None = None
    run: str | None = None
    outcome: str | None = None
    note: str = ""


class Continuation(msgspec.Struct, frozen=True):
    """The resolved gate a continuation run picks up from: shown first, always kept."""

    gate: str
    summary: str
    outcome: str
    note: str = ""


class ChannelMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """One message of a channel's log, as history for a fresh session and as
    backlog for a later turn; ``run`` is the session whose turn posted it."""

    seq: int
    sender: str
    text: str
    at: float
    run: str | None = None


class RunMeta(msgspec.Struct, frozen=True):
    """Host-owned, volatile facts of one compilation; never before end of system."""

    run: str
    turn: int
    now: float


class Shown(msgspec.Struct, frozen=True):
    """An envelope a session already sent: the sha256 of its line, and the
    turn that sent it."""

    sha256: str
    turn: int


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
    their terms when the message is short.
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
