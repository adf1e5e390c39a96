"""The one exception tree of rosterd, grouped by how a caller reacts.

Errors from anyio, the OS, TOML, msgspec and httpx are mapped to these at the
boundary where they arise, so callers only ever catch ``RosterError``. One
branch lives with what it carries: ``rosterd.compiler.CompileError``, whose
``record`` is the failed compilation's trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class RosterError(Exception):
    """Base of every error rosterd raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(RosterError):
    """An org directory that cannot be used: bad TOML, unknown key, missing file."""

    def __init__(self, message: str, *, path: str, key: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.key = key


class InvalidIdError(RosterError):
    """An id that does not match ``[A-Za-z0-9][A-Za-z0-9._-]{0,63}``."""

    def __init__(self, kind: str, value: str) -> None:
        super().__init__(f"invalid {kind} id {value!r}: expected [A-Za-z0-9][A-Za-z0-9._-]{{0,63}}")
        self.kind = kind
        self.value = value


class NotFoundError(RosterError):
    """A well-formed id that names nothing: unknown worker, channel, run, gate."""

    def __init__(self, kind: str, name: str, detail: str = "") -> None:
        super().__init__(f"unknown {kind} {name!r}{': ' + detail if detail else ''}")
        self.kind = kind
        self.name = name


class ProtocolError(RosterError):
    """A request on the socket that breaks JSON-RPC or the method's schema."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


class RpcError(RosterError):
    """An error reply from the daemon, to a client: its JSON-RPC code and data."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class StorageError(RosterError):
    """A write or read of persisted state that failed (disk full, permission).

    Fail-stop: nothing that raised this was acknowledged, and the store
    that raised it has cut back anything half-written before it returns.
    """

    def __init__(self, message: str, *, path: str, op: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.op = op
        self.errno = errno


class ConflictError(RosterError):
    """A well-formed request that the current state refuses: a gate already
    resolved, another worker's run, a run that sent nothing yet."""


class StaleError(ConflictError):
    """What this host held of a run, or of a turn's inputs, was out of date
    when it wrote: another host wrote since, or holds the run's lease.
    Nothing of the write was kept; the caller reads again and retries."""


class SessionError(RosterError):
    """A session that cannot do what was asked: closed, expired, unknown."""


class ShutdownError(RosterError):
    """A turn cut short because the daemon is stopping and ``drain_s`` ran out.

    Its user turn and an ``error`` entry are in the transcript, so a resumed
    session sends that user turn again; retry once the daemon is back.
    """


class EngineError(RosterError):
    """A model provider that failed after retries, or answered nonsense."""

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        retryable: bool = False,
        context_exceeded: bool = False,
        tried: tuple[tuple[str, str], ...] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.retryable = retryable
        # The provider refused the request as longer than its context window:
        # the same request can never succeed, but a rolled-over session can.
        self.context_exceeded = context_exceeded
        # With fallbacks: each engine tried, by name, and what it answered.
        self.tried = tried
        # Seconds until the engine takes calls again, when that is known.
        self.retry_after = retry_after


@contextmanager
def as_itself() -> Iterator[None]:
    """One failure raises as itself, not inside a task group's exception
    group: a part that cannot start (the inspector, its port taken; the
    database) is a ``RosterError`` that ``roster serve`` shows as one line,
    as it does a bad org."""
    try:
        yield
    except BaseExceptionGroup as group:
        match group.exceptions:
            case (Exception() as error,):
                raise error from None
        raise
