"""The runtime: warm sessions, queued tasks and direct runs, and the one
path every one of their turns takes from compiled input to engine and back.

Its loggers keep the names operators filter on: ``rosterd.sessions`` for
sessions, leases and turns, ``rosterd.tasks`` and ``rosterd.tools``."""

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
