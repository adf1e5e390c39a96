"""Sessions and runs: the one path from compiled input to engine and back."""

from ._cache import judge_cache
from ._host import Host, TurnOutcome
from ._lifetime import CachePlan, plan_cache
from ._session import Session, SessionManager
from ._shown import ShownLedger
from ._tasks import TaskRunner, direct_run
from ._waits import settled

__all__ = (
    "CachePlan",
    "Host",
    "Session",
    "SessionManager",
    "ShownLedger",
    "TaskRunner",
    "TurnOutcome",
    "direct_run",
    "judge_cache",
    "plan_cache",
    "settled",
)
