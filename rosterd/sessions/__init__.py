"""Sessions and runs: the one path from compiled input to engine and back."""

from ._host import Host, TurnOutcome
from ._runs import (
    ActiveRun,
    RunInfo,
    RunStatus,
    RunStore,
    SessionState,
    TranscriptEntry,
    chat_messages,
    request_at_turn,
)
from ._session import Session, SessionManager
from ._tasks import TaskRunner, direct_run

__all__ = (
    "ActiveRun",
    "Host",
    "RunInfo",
    "RunStatus",
    "RunStore",
    "Session",
    "SessionManager",
    "SessionState",
    "TaskRunner",
    "TranscriptEntry",
    "TurnOutcome",
    "chat_messages",
    "direct_run",
    "request_at_turn",
)
