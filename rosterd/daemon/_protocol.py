"""The wire format: JSON-RPC 2.0, one JSON object per line, UTF-8.

Requests decode in two steps with reused decoders: the envelope first, then
the params into the method's own Struct, which forbids unknown fields. Every
error a client can cause maps to a JSON-RPC error object here, in one place.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from .._errors import (
    CompileError,
    ConfigError,
    ConflictError,
    EngineError,
    InvalidIdError,
    NotFoundError,
    ProtocolError,
    RosterError,
    SessionError,
    ShutdownError,
    StorageError,
)

__all__ = (
    "METHODS",
    "ChannelPost",
    "DaemonStatus",
    "ErrorObject",
    "GateFile",
    "GateList",
    "GateResolve",
    "MemoryAdd",
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
    "decode_request",
    "encode_error",
    "encode_notification",
    "encode_result",
    "error_object",
)

LINE_LIMIT = 1 << 20

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
COMPILE_FAILED = 1001
ENGINE_FAILED = 1002
NOT_FOUND = 1003
SESSION_ERROR = 1004
CONFIG_ERROR = 1005
FORBIDDEN = 1006
BUSY = 1007
STORAGE_FAILED = 1008
CONFLICT = 1009
SHUTTING_DOWN = 1010

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


class DaemonStatus(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pass


class SessionOpen(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    worker: Id
    channel: Id


class SessionSend(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    session: Id
    text: MessageText
    sender: Sender = msgspec.field(default="operator", name="from")


class SessionClose(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    session: Id


class RunDirect(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    worker: Id
    text: MessageText
    sender: Sender = msgspec.field(default="operator", name="from")


class TaskSubmit(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    worker: Id
    channel: Id
    text: MessageText


class TaskGet(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    task: Id


class TaskList(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pass


class ChannelPost(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    channel: Id
    sender: Sender = msgspec.field(name="from")
    text: MessageText = ""


class MemoryAdd(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    worker: Id
    text: MemoryText
    channel: Id | None = None


class MemoryList(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    worker: Id


class GateFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    worker: Id
    summary: GateText
    channel: Id | None = None
    run: Id | None = None


class GateResolve(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    gate: Id
    outcome: Text
    note: GateNote = ""


class GateList(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    worker: Id | None = None


class RunsList(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pass


class RunsShow(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    run: Id


class RunsContext(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
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
    "gate.file": GateFile,
    "gate.resolve": GateResolve,
    "gate.list": GateList,
    "runs.list": RunsList,
    "runs.show": RunsShow,
    "runs.context": RunsContext,
}

RequestId = int | str | None


class _Envelope(msgspec.Struct):
    jsonrpc: str
    method: str
    id: RequestId | msgspec.UnsetType = msgspec.UNSET
    params: msgspec.Raw = msgspec.Raw(b"{}")


class ErrorObject(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class Request(msgspec.Struct, frozen=True):
    """A decoded call; ``id`` is ``UNSET`` for a notification."""

    id: RequestId | msgspec.UnsetType
    method: str
    params: Params


class BadRequest(Exception):
    """A line that cannot be dispatched; carries the reply to send."""

    def __init__(self, request_id: RequestId, error: ErrorObject) -> None:
        super().__init__(error.message)
        self.request_id = request_id
        self.error = error


_envelope_decoder = msgspec.json.Decoder(_Envelope)
_param_decoders = {name: msgspec.json.Decoder(kind) for name, kind in METHODS.items()}
_encoder = msgspec.json.Encoder()


def decode_request(line: bytes) -> Request:
    """Decode one line, or raise ``BadRequest`` with the JSON-RPC error."""
    if not line.isascii():
        # msgspec does not check the bytes of fields it skips; the whole line must be UTF-8.
        try:
            line.decode()
        except UnicodeDecodeError as exc:
            raise BadRequest(
                None, ErrorObject(PARSE_ERROR, f"parse error: invalid UTF-8 at byte {exc.start}")
            ) from None
    try:
        envelope = _envelope_decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise BadRequest(None, ErrorObject(INVALID_REQUEST, f"invalid request: {exc}")) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(None, ErrorObject(PARSE_ERROR, f"parse error: {exc}")) from None
    except RecursionError:
        # msgspec recurses per nesting level (params too, when it skips them as
        # Raw): a line of 100k '[' must get an error, not kill the daemon.
        raise BadRequest(None, ErrorObject(PARSE_ERROR, "parse error: nested too deeply")) from None
    request_id = None if envelope.id is msgspec.UNSET else envelope.id
    if envelope.jsonrpc != "2.0":
        raise BadRequest(
            request_id, ErrorObject(INVALID_REQUEST, 'invalid request: jsonrpc must be "2.0"')
        )
    decoder = _param_decoders.get(envelope.method)
    if decoder is None:
        raise BadRequest(
            request_id,
            ErrorObject(METHOD_NOT_FOUND, f"method not found: {envelope.method[:100]!r}"),
        )
    try:
        params = decoder.decode(envelope.params)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        message = str(exc).replace("`$.", "`params.").replace("`$`", "`params`")
        raise BadRequest(
            request_id, ErrorObject(INVALID_PARAMS, f"invalid params: {message}")
        ) from None
    return Request(id=envelope.id, method=envelope.method, params=params)


class _Result(msgspec.Struct):
    jsonrpc: str
    id: RequestId
    result: Any


class _Error(msgspec.Struct):
    jsonrpc: str
    id: RequestId
    error: ErrorObject


class _Notification(msgspec.Struct):
    jsonrpc: str
    method: str
    params: Any


def encode_result(request_id: RequestId, result: object) -> bytes:
    return _encoder.encode(_Result("2.0", request_id, result)) + b"\n"


def encode_error(request_id: RequestId, error: ErrorObject) -> bytes:
    return _encoder.encode(_Error("2.0", request_id, error)) + b"\n"


def encode_notification(method: str, params: object) -> bytes:
    return _encoder.encode(_Notification("2.0", method, params)) + b"\n"


def error_object(exc: RosterError) -> ErrorObject:
    """The JSON-RPC error for one of our errors; no traceback, no secrets."""
    match exc:
        case CompileError():
            run = exc.record.run if exc.record is not None else None
            data = {"run": run, "block": exc.block, "size": exc.size, "limit": exc.limit}
            return ErrorObject(COMPILE_FAILED, str(exc), data)
        case EngineError():
            data = {
                "provider": exc.provider,
                "status": exc.status,
                "retryable": exc.retryable,
                "context_exceeded": exc.context_exceeded,
            }
            return ErrorObject(ENGINE_FAILED, str(exc), data)
        case NotFoundError():
            return ErrorObject(NOT_FOUND, str(exc), {"kind": exc.kind, "name": exc.name})
        case InvalidIdError():
            return ErrorObject(INVALID_PARAMS, str(exc), {"kind": exc.kind, "value": exc.value})
        case SessionError():
            return ErrorObject(SESSION_ERROR, str(exc))
        case ConfigError():
            return ErrorObject(CONFIG_ERROR, str(exc), {"path": exc.path, "key": exc.key})
        case ShutdownError():
            return ErrorObject(SHUTTING_DOWN, str(exc))
        case StorageError():
            return ErrorObject(STORAGE_FAILED, str(exc), {"op": exc.op, "errno": exc.errno})
        case ConflictError():
            return ErrorObject(CONFLICT, str(exc))
        case ProtocolError():
            return ErrorObject(exc.code, str(exc))
    # Every error raised on purpose has a class above; one without is a bug.
    return ErrorObject(INTERNAL_ERROR, f"internal error: {exc}")
