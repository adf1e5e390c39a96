"""The state directory as one resource: every store, opened and closed together."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import anyio.to_thread
from anyio.abc import AsyncResource

from ._channels import FileChannels
from ._gates import FileGates
from ._jsonl import make_private_dir, remove_leftover_tmp
from ._memory import FileMemory
from ._prefixes import FilePrefixes
from ._runs import FileRuns
from ._tasks import FileTasks


class FileState(AsyncResource):
    """Channels, memory, gates, tasks, runs and prefixes under one directory.

    ``async with FileState(state_dir) as state:`` recovers every log
    (dropping torn last lines) before the daemon accepts a request. The
    daemon holds the directory's lock: one process writes it at a time.
    """

    channels: FileChannels
    memory: FileMemory
    gates: FileGates
    tasks: FileTasks
    runs: FileRuns
    prefixes: FilePrefixes

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs = FileRuns(root)
        self.prefixes = FilePrefixes(root)
        self._stack = AsyncExitStack()

    def __repr__(self) -> str:
        return f"FileState({str(self.root)!r})"

    async def __aenter__(self) -> FileState:
        # A directory made by hand (`mkdir -p .state`) starts 0755: tighten it.
        await anyio.to_thread.run_sync(make_private_dir, self.root)
        # The state lock is held and nothing writes yet: any .tmp is a kill's.
        # Those of runs are looked for by the runs' recovery, in the runs a
        # kill can have left one in: not in the directories of months of runs.
        await anyio.to_thread.run_sync(remove_leftover_tmp, self.root, "runs")
        async with AsyncExitStack() as stack:
            stack.push_async_callback(self.runs.aclose)
            self.channels = FileChannels(self.root / "channels")
            self.runs.channels = self.channels
            stack.push_async_callback(self.channels.aclose)
            self.memory = FileMemory(self.root / "memory")
            stack.push_async_callback(self.memory.aclose)
            self.gates = await FileGates.open(self.root / "gates.jsonl")
            stack.push_async_callback(self.gates.aclose)
            self.tasks = await FileTasks.open(self.root / "tasks.jsonl")
            stack.push_async_callback(self.tasks.aclose)
            self._stack = stack.pop_all()
        return self

    async def aclose(self) -> None:
        await self._stack.aclose()
