"""rosterd: the host daemon of Roster, an organisation of AI workers."""

from ._clock import LOOP_CLOCK, SYSTEM_CLOCK, Clock, LoopClock, SystemClock
from ._errors import (
    ConfigError,
    ConflictError,
    EngineError,
    InvalidIdError,
    NotFoundError,
    ProtocolError,
    RosterError,
    SessionError,
    ShutdownError,
    StaleError,
    StorageError,
)
from ._ids import check_id, is_id

__version__ = "0.1.0"

__all__ = (
    "LOOP_CLOCK",
    "SYSTEM_CLOCK",
    "Clock",
    "ConfigError",
    "ConflictError",
    "EngineError",
    "InvalidIdError",
    "LoopClock",
    "NotFoundError",
    "ProtocolError",
    "RosterError",
    "SessionError",
    "ShutdownError",
    "StaleError",
    "StorageError",
    "SystemClock",
    "__version__",
    "check_id",
    "is_id",
)
