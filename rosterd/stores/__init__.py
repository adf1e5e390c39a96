"""Stores: the durable state the compiler reads and the daemon writes."""

from ._channels import ChannelStore
from ._files import (
    JsonlLog,
    StateTable,
    read_document,
    read_log,
    repair_tail,
    write_document,
)
from ._gates import GateState, GateStore
from ._memory import MemoryStore
from ._state import StateStores
from ._tasks import TaskState, TaskStatus, TaskStore

__all__ = (
    "ChannelStore",
    "GateState",
    "GateStore",
    "JsonlLog",
    "MemoryStore",
    "StateStores",
    "StateTable",
    "TaskState",
    "TaskStatus",
    "TaskStore",
    "read_document",
    "read_log",
    "repair_tail",
    "write_document",
)
