"""Error codes: every error a client can cause, as a JSON-RPC error object.

Our errors map to their code here, in one place; the daemon sends the
object, a client raises it as ``RpcError`` with the same code and data.
"""

from __future__ import annotations

from typing import Any

import msgspec

# error_object matches every class of the tree, so it reads them from their module.
from .. import _errors
from ..compiler import CompileError

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


class ErrorObject(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


def error_object(exc: _errors.RosterError) -> ErrorObject:
    """The JSON-RPC error for one of our errors; no traceback, no secrets."""
    match exc:
        case CompileError():
            run = exc.record.run if exc.record is not None else None
            data = {"run": run, "block": exc.block, "size": exc.size, "limit": exc.limit}
            return ErrorObject(COMPILE_FAILED, str(exc), data)
        case _errors.EngineError():
            failed: dict[str, object] = {
                "provider": exc.provider,
                "status": exc.status,
                "retryable": exc.retryable,
                "context_exceeded": exc.context_exceeded,
            }
            if exc.tried:
                failed["engines"] = [{"engine": name, "error": error} for name, error in exc.tried]
            if exc.retry_after is not None:
                failed["retry_after"] = round(exc.retry_after, 3)
            return ErrorObject(ENGINE_FAILED, str(exc), failed)
        case _errors.NotFoundError():
            return ErrorObject(NOT_FOUND, str(exc), {"kind": exc.kind, "name": exc.name})
        case _errors.InvalidIdError():
            return ErrorObject(INVALID_PARAMS, str(exc), {"kind": exc.kind, "value": exc.value})
        case _errors.SessionError():
            return ErrorObject(SESSION_ERROR, str(exc))
        case _errors.ConfigError():
            return ErrorObject(CONFIG_ERROR, str(exc), {"path": exc.path, "key": exc.key})
        case _errors.ShutdownError():
            return ErrorObject(SHUTTING_DOWN, str(exc))
        case _errors.StorageError():
            return ErrorObject(STORAGE_FAILED, str(exc), {"op": exc.op, "errno": exc.errno})
        case _errors.ConflictError():
            return ErrorObject(CONFLICT, str(exc))
        case _errors.ProtocolError():
            return ErrorObject(exc.code, str(exc))
    # Every error raised on purpose has a class above; one without is a bug.
    return ErrorObject(INTERNAL_ERROR, f"internal error: {exc}")
