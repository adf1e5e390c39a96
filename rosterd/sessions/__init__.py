"""Sessions and runs: the one path from compiled input to engine and back."""

from ._cache import CacheCheck, Verdict, judge_cache
from ._host import Host, TurnOutcome
from ._lifetime import CachePlan, plan_cache
from ._runs import (
    CONTEXT_PAGE_CHARS,
    CONTEXT_PAGE_TURNS,
    ContextPage,
    RunInfo,
    RunStatus,
    TranscriptEntry,
    TurnRequest,
    chat_messages,
    context_json_items,
    context_page,
    request_at_turn,
)
from ._session import Session, SessionManager
from ._shown import ShownLedger
from ._tasks import TaskRunner, direct_run

__all__ = (
    "CONTEXT_PAGE_CHARS",
    "CONTEXT_PAGE_TURNS",
    "CacheCheck",
    "CachePlan",
    "ContextPage",
    "Host",
    "RunInfo",
    "RunStatus",
    "Session",
    "SessionManager",
    "ShownLedger",
    "TaskRunner",
    "TranscriptEntry",
    "TurnOutcome",
    "TurnRequest",
    "Verdict",
    "chat_messages",
    "context_json_items",
    "context_page",
    "direct_run",
    "judge_cache",
    "plan_cache",
    "request_at_turn",
)
