"""The methods: one params Struct each, which names its method, its result
and its notifications; the method table derives from them.

A method is declared once, here, as a subclass of ``Call``: the daemon's
decoder, the method table, the typed client (``RosterClient.request``) and
the protocol docs check all read ``METHODS``. The daemon decodes each
request's params into its method's Struct, which forbids unknown fields; a
client encodes the same Struct, leaving out the options it did not set.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Generic, TypeVar, get_args, get_origin

import msgspec

from ..compiler import ChannelMessage
from ._records import ContextPage, GateState, RunInfo, TaskState
from ._results import (
    Closed,
    MemoryNote,
    RunShown,
    SessionOpened,
    StatusResult,
    TurnResult,
)

Id = Annotated[str, msgspec.Meta(pattern=r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")]
Sender = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Text = Annotated[str, msgspec.Meta(min_length=1)]
# Input size limits, in characters (docs/protocol.md, Limits).
MEMORY_NOTE_MAX = 64 * 1024
CHANNEL_MESSAGE_MAX = 256 * 1024
GATE_TEXT_MAX = 64 * 1024
MemoryText = Annotated[str, msgspec.Meta(min_length=1, max_length=MEMORY_NOTE_MAX)]
MessageText = Annotated[str, msgspec.Meta(min_length=1, max_length=CHANNEL_MESSAGE_MAX)]
GateText = Annotated[str, msgspec.Meta(min_length=1, max_length=GATE_TEXT_MAX)]
GateNote = Annotated[str, msgspec.Meta(max_length=GATE_TEXT_MAX)]
REASON_MAX = 4096
Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=REASON_MAX)]
# The most items one page of a list method holds (``limit``).
LIST_PAGE_MAX = 10_000
PageLimit = Annotated[int, msgspec.Meta(ge=1, le=LIST_PAGE_MAX)]

R = TypeVar("R")
# Each method's params Struct, by method name; filled as ``Call`` is subclassed.
METHODS: dict[str, type[Call[Any]]] = {}


class Call(msgspec.Struct, Generic[R], forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """The params of one method, which returns an ``R``.

    A subclass names its ``method`` and the ``notifications`` it sends
    before the result, and is entered in ``METHODS`` as it is defined; one
    that names no method (``TurnCall``) is what several methods share. Its
    ``result`` is the ``R`` it subclasses ``Call[R]`` with, so the type that
    checks a caller is the one the client decodes the reply as.
    """

    method: ClassVar[str]
    result: ClassVar[Any]
    notifications: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in vars(cls).get("__orig_bases__", ()):
            if get_origin(base) is Call:
                (cls.result,) = get_args(base)
        if "method" not in vars(cls):
            return
        if cls.method in METHODS:
            raise TypeError(f"method {cls.method!r} is declared twice")
        METHODS[cls.method] = cls


class DaemonStatus(Call[StatusResult], frozen=True):
    """The daemon's state, after loading any org edit saved before the call."""

    method = "daemon.status"


class SessionOpen(Call[SessionOpened], frozen=True):
    """The warm session of *worker* in *channel*: the one open (frontends
    share it), one resumed from the state after a restart, or a new one."""

    method = "session.open"

    worker: Id
    channel: Id


class TurnCall(Call[TurnResult], frozen=True, kw_only=True):
    """The params every turn takes: its text and who sends it; the turn
    streams ``turn.delta`` and ``turn.wait`` before its result. Keyword-only,
    so that a method's own fields come first."""

    notifications = ("turn.delta", "turn.wait")

    text: MessageText
    sender: Sender = msgspec.field(default="operator", name="from")


class SessionSend(TurnCall, frozen=True):
    """A turn of *session*; if it rolls over, its successor answers."""

    method = "session.send"

    session: Id


class SessionClose(Call[Closed], frozen=True):
    """Close *session*; the pair's next ``session.open`` starts a new one."""

    method = "session.close"

    session: Id


class RunDirect(TurnCall, frozen=True):
    """A run of *worker* outside any channel: one compilation, one turn."""

    method = "run.direct"

    worker: Id


class TaskSubmit(Call[TaskState], frozen=True):
    """Queue a task of *worker* in *channel*; the task pool runs it."""

    method = "task.submit"

    worker: Id
    channel: Id
    text: MessageText


# The longest a call that waits (``task.get``, ``runs.show``) waits, in seconds.
WAIT_MAX_S = 600.0
WaitSeconds = Annotated[float, msgspec.Meta(ge=0, le=WAIT_MAX_S)]


class TaskGet(Call[TaskState], frozen=True):
    """With ``wait``: once the task is done, failed or paused, or ``wait`` s ran out."""

    method = "task.get"

    task: Id
    wait: WaitSeconds | None = None


class TaskList(Call[list[TaskState]], frozen=True):
    """Every task, oldest first; with ``limit``, a page: the newest ``limit``
    submitted before task ``before`` (before none: the newest)."""

    method = "task.list"

    limit: PageLimit | None = None
    before: Id | None = None


class ChannelPost(Call[ChannelMessage], frozen=True):
    """Append *sender*'s message to *channel*'s log: history for the sessions
    opened later, backlog for those open."""

    method = "channel.post"

    channel: Id
    sender: Sender = msgspec.field(name="from")
    text: MessageText


class MemoryAdd(Call[MemoryNote], frozen=True):
    """A note for *worker*'s compilations from the next on; with *channel*,
    only runs in that channel see it."""

    method = "memory.add"

    worker: Id
    text: MemoryText
    channel: Id | None = None


class MemoryList(Call[list[MemoryNote]], frozen=True):
    """The live notes; ``all`` adds the retired ones, with their retirement.
    ``limit`` and ``before`` page them as ``task.list``'s do."""

    method = "memory.list"

    worker: Id
    all: bool = False
    limit: PageLimit | None = None
    before: Id | None = None


class MemoryForget(Call[MemoryNote], frozen=True):
    """An operator retires any note of *worker*."""

    method = "memory.forget"

    worker: Id
    note: Id
    because: Reason


class GateFile(Call[GateState], frozen=True):
    """A gate for *worker*, shown in its next briefing; with *run*, that task
    run pauses until the gate is resolved."""

    method = "gate.file"

    worker: Id
    summary: GateText
    channel: Id | None = None
    run: Id | None = None


class GateResolve(Call[GateState], frozen=True):
    """Resolve *gate*: a task paused on it continues with the outcome, and a
    session of the worker is shown it once."""

    method = "gate.resolve"

    gate: Id
    outcome: Text
    note: GateNote = ""


class GateList(Call[list[GateState]], frozen=True):
    """Every gate, oldest first; with *worker*, that worker's. ``limit`` and
    ``before`` page it as ``task.list``'s do."""

    method = "gate.list"

    worker: Id | None = None
    limit: PageLimit | None = None
    before: Id | None = None


class RunsList(Call[list[RunInfo]], frozen=True):
    """Every run, oldest first. ``limit`` and ``before`` page it as
    ``task.list``'s do."""

    method = "runs.list"

    limit: PageLimit | None = None
    before: Id | None = None


class RunsShow(Call[RunShown], frozen=True):
    """With ``wait``: once the run is no longer open, or ``wait`` s ran out."""

    method = "runs.show"

    run: Id
    wait: WaitSeconds | None = None


class RunsContext(Call[ContextPage], frozen=True):
    """``all`` pages: turns after ``after``, at most ``limit`` of them per reply."""

    method = "runs.context"

    run: Id
    all: bool = False
    after: Annotated[int, msgspec.Meta(ge=0)] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] | None = None
