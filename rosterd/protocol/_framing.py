"""Framing: JSON-RPC 2.0, one JSON object per line, UTF-8.

The daemon decodes requests in two steps with reused decoders: the
envelope first, then the params into the method's own Struct. A client
encodes a request from the same Struct and reads each reply line as an
envelope whose ``result`` (or notification ``params``) it decodes into the
type it expects.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._codes import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, ErrorObject
from ._params import METHODS, Call

# The longest request line the daemon reads (docs/protocol.md, Limits).
LINE_LIMIT = 1 << 20

RequestId = int | str | None


class _Envelope(msgspec.Struct):
    jsonrpc: str
    method: str
    id: RequestId | msgspec.UnsetType = msgspec.UNSET
    params: msgspec.Raw = msgspec.Raw(b"{}")


class Request(msgspec.Struct, frozen=True):
    """A decoded call; ``id`` is ``UNSET`` for a notification."""

    id: RequestId | msgspec.UnsetType
    method: str
    params: Call[Any]


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


class _Request(msgspec.Struct):
    jsonrpc: str
    id: int
    method: str
    params: Call[Any]


class Reply(msgspec.Struct, frozen=True):
    """One line from the daemon: a reply to ``id``, or a notification when
    ``method`` is set; ``result`` and ``params`` are left undecoded."""

    jsonrpc: str = "2.0"
    id: RequestId = None
    method: str | None = None
    params: msgspec.Raw = msgspec.Raw(b"null")
    result: msgspec.Raw = msgspec.Raw(b"null")
    error: ErrorObject | None = None


_reply_decoder = msgspec.json.Decoder(Reply)


def encode_request(request_id: int, params: Call[Any]) -> bytes:
    """A request line calling the method *params* are the params of."""
    return _encoder.encode(_Request("2.0", request_id, params.method, params)) + b"\n"


def decode_reply(line: bytes) -> Reply:
    """One reply line; raises ``msgspec.DecodeError`` if it is not one."""
    return _reply_decoder.decode(line)
