"""Stores: the durable state the compiler reads and the daemon writes.

``_interface`` says what every backend provides; ``files/`` is the backend
that keeps it all under one state directory.
"""

from ..protocol import GateState, TaskState, TaskStatus
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
from ._records import SessionState, cut_off
from .files import FileRuns, FileState

__all__ = (
    "BACKENDS",
    "ActiveRun",
    "Backend",
    "ChannelStore",
    "FileRuns",
    "FileState",
    "GateState",
    "GateStore",
    "MemoryStore",
    "PrefixStore",
    "RunReader",
    "RunStore",
    "SessionState",
    "State",
    "TaskState",
    "TaskStatus",
    "TaskStore",
    "backend",
    "cut_off",
    "open_state",
    "read_state_runs",
)
