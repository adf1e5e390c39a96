"""What the compiler reads besides the org: store records and host run
metadata, each a frozen Struct.

The stores hand these over already loaded; the compiler filters them by the
run's scope itself, so selection never depends on text inside a message.
"""

from __future__ import annotations

from typing import Literal

import msgspec

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
    """A question a worker waits on, filed for a channel or worker-wide, as
    the stores keep it (``protocol.GateState`` is this record on the wire).

    Open gates have no ``outcome``; a gate resolved since a session's last
    turn is passed with its outcome, so the next briefing shows it once.
    The compiler reads neither ``status`` nor ``resolved_at``.
    """

    id: str
    worker: str
    summary: str
    filed_at: float
    channel: str | None = None
    run: str | None = None
    status: Literal["open", "resolved"] = "open"
    outcome: str | None = None
    note: str = ""
    resolved_at: float | None = None


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
