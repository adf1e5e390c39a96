"""Sessions and runs: the one path from compiled input to engine and back."""

from ._cache import CacheCheck, PrefixRegistry, Verdict, judge_cache
from ._host import Host, TurnOutcome
from ._runs import (
    CONTEXT_PAGE_CHARS,
    CONTEXT_PAGE_TURNS,
    ActiveRun,
    ContextPage,
    RunInfo,
    RunStatus,
    RunStore,
    SessionState,
    TranscriptEntry,
    TurnRequest,
    chat_messages,
    context_page,
    request_at_turn,
)
from ._session import Session, SessionManager
from ._shown import ShownLedger
from ._tasks import TaskRunner, direct_run

__all__ = (
    "CONTEXT_PAGE_CHARS",
    "CONTEXT_PAGE_TURNS",
    "ActiveRun",
    "CacheCheck",
    "ContextPage",
    "Host",
    "PrefixRegistry",
    "RunInfo",
    "RunStatus",
    "RunStore",
    "Session",
    "SessionManager",
    "SessionState",
    "ShownLedger",
    "TaskRunner",
    "TranscriptEntry",
    "TurnOutcome",
    "TurnRequest",
    "Verdict",
    "chat_messages",
    "context_page",
    "direct_run",
    "judge_cache",
    "request_at_turn",
)
