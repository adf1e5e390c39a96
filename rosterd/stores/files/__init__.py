"""The file backend: JSONL logs and atomically replaced documents under one
state directory, the default."""

from ._channels import FileChannels
from ._gates import FileGates
from ._memory import FileMemory
from ._prefixes import FilePrefixes
from ._runs import FileRun, FileRuns
from ._state import FileState
from ._tasks import FileTasks

__all__ = (
    "FileChannels",
    "FileGates",
    "FileMemory",
    "FilePrefixes",
    "FileRun",
    "FileRuns",
    "FileState",
    "FileTasks",
)
