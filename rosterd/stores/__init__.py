"""Stores: the durable state the compiler reads and the daemon writes.

``_interface`` says what every backend provides; ``files/`` is the backend
that keeps it all under one state directory.
"""

from ._backends import BACKENDS, Backend, backend, open_state, read_state_runs
from ._interface import (
    ActiveRun,
    ChannelStore,
    GateStore,
    MemoryStore,
    PrefixStore,
    RunReader,
    RunStore,
    State,
    TaskStore,
)
from ._listing import RunList, UnreadableRun
from ._records import Posts, SessionState, cut_off

__all__ = (
    "BACKENDS",
    "ActiveRun",
    "Backend",
    "ChannelStore",
    "GateStore",
    "MemoryStore",
    "Posts",
    "PrefixStore",
    "RunList",
    "RunReader",
    "RunStore",
    "SessionState",
    "State",
    "TaskStore",
    "UnreadableRun",
    "backend",
    "cut_off",
    "open_state",
    "read_state_runs",
)
