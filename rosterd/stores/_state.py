"""The state directory as one resource: every store, opened and closed together."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import anyio.to_thread
from anyio.abc import AsyncResource

from ._channels import ChannelStore
from ._files import make_private_dir, remove_leftover_tmp
from ._gates import GateStore
from ._memory import MemoryStore
from ._tasks import TaskStore

__all__ = ("StateStores",)


class StateStores(AsyncResource):
    """Channels, memory, gates and tasks under one state directory.

    ``async with StateStores(state_dir) as stores:`` recovers every store
    (dropping torn last lines) before the daemon accepts a request.
    """

    channels: ChannelStore
    memory: MemoryStore
    gates: GateStore
    tasks: TaskStore

    def __init__(self, root: Path) -> None:
        self.root = root
        self._stack = AsyncExitStack()

    def __repr__(self) -> str:
        return f"StateStores({str(self.root)!r})"

    async def __aenter__(self) -> StateStores:
        # A directory made by hand (`mkdir -p .state`) starts 0755: tighten it.
        await anyio.to_thread.run_sync(make_private_dir, self.root)
        # The state lock is held and nothing writes yet: any .tmp is a kill's.
        await anyio.to_thread.run_sync(remove_leftover_tmp, self.root)
        async with AsyncExitStack() as stack:
            self.channels = ChannelStore(self.root / "channels")
            stack.push_async_callback(self.channels.aclose)
            self.memory = MemoryStore(self.root / "memory")
            stack.push_async_callback(self.memory.aclose)
            self.gates = await GateStore.open(self.root / "gates.jsonl")
            stack.push_async_callback(self.gates.aclose)
            self.tasks = await TaskStore.open(self.root / "tasks.jsonl")
            stack.push_async_callback(self.tasks.aclose)
            self._stack = stack.pop_all()
        return self

    async def aclose(self) -> None:
        await self._stack.aclose()
