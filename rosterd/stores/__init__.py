"""Stores: the durable state the compiler reads and the daemon writes.

``_interface`` says what every backend provides; ``files/`` is the backend
that keeps it all under one state directory.
"""

from ..protocol import GateState, TaskState, TaskStatus
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
from ._open import read_state_runs
from ._records import SessionState, cut_off
from .files import FileRuns, FileState

__all__ = (
    "ActiveRun",
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
    "cut_off",
    "read_state_runs",
)
