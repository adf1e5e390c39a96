"""Request params: one Struct per method, and the method table.

The daemon decodes each request's params into its method's Struct, which
forbids unknown fields; a client encodes the same Struct, leaving out the
options it did not set.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = (
    "METHODS",
    "ChannelPost",
    "DaemonStatus",
    "GateFile",
    "GateList",
    "GateResolve",
    "MemoryAdd",
    "MemoryForget",
    "MemoryList",
    "Params",
    "RunDirect",
    "RunsContext",
    "RunsList",
    "RunsShow",
    "SessionClose",
    "SessionOpen",
    "SessionSend",
    "TaskGet",
    "TaskList",
    "TaskSubmit",
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


class DaemonStatus(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    pass


class SessionOpen(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    worker: Id
    channel: Id


class SessionSend(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    session: Id
    text: MessageText
    sender: Sender = msgspec.field(default="operator", name="from")


class SessionClose(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    session: Id


class RunDirect(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    worker: Id
    text: MessageText
    sender: Sender = msgspec.field(default="operator", name="from")


class TaskSubmit(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    worker: Id
    channel: Id
    text: MessageText


class TaskGet(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    task: Id


class TaskList(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    pass


class ChannelPost(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    channel: Id
    sender: Sender = msgspec.field(name="from")
    text: MessageText = ""


class MemoryAdd(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    worker: Id
    text: MemoryText
    channel: Id | None = None


class MemoryList(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """The live notes; ``all`` adds the retired ones, with their retirement."""

    worker: Id
    all: bool = False


class MemoryForget(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """An operator retires any note of *worker*."""

    worker: Id
    note: Id
    because: Reason


class GateFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    worker: Id
    summary: GateText
    channel: Id | None = None
    run: Id | None = None


class GateResolve(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    gate: Id
    outcome: Text
    note: GateNote = ""


class GateList(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    worker: Id | None = None


class RunsList(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    pass


class RunsShow(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    run: Id


class RunsContext(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """``all`` pages: turns after ``after``, at most ``limit`` of them per reply."""

    run: Id
    all: bool = False
    after: Annotated[int, msgspec.Meta(ge=0)] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] | None = None


Params = (
    DaemonStatus
    | SessionOpen
    | SessionSend
    | SessionClose
    | RunDirect
    | TaskSubmit
    | TaskGet
    | TaskList
    | ChannelPost
    | MemoryAdd
    | MemoryList
    | MemoryForget
    | GateFile
    | GateResolve
    | GateList
    | RunsList
    | RunsShow
    | RunsContext
)

METHODS: dict[str, type[Params]] = {
    "daemon.status": DaemonStatus,
    "session.open": SessionOpen,
    "session.send": SessionSend,
    "session.close": SessionClose,
    "run.direct": RunDirect,
    "task.submit": TaskSubmit,
    "task.get": TaskGet,
    "task.list": TaskList,
    "channel.post": ChannelPost,
    "memory.add": MemoryAdd,
    "memory.list": MemoryList,
    "memory.forget": MemoryForget,
    "gate.file": GateFile,
    "gate.resolve": GateResolve,
    "gate.list": GateList,
    "runs.list": RunsList,
    "runs.show": RunsShow,
    "runs.context": RunsContext,
}
