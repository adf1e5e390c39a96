"""A worker's notes indexed once, as every backend does on its first read."""

from __future__ import annotations

import gc
from collections.abc import Iterable

import anyio.to_thread

from ..compiler import MemoryIndex, MemoryItem

__all__ = ("index_notes",)


async def index_notes(notes: Iterable[MemoryItem]) -> MemoryIndex:
    """The index of *notes*, built off the event loop (months of notes take
    a while).

    The index lives as long as the daemon, as do the modules loaded before
    it: out of the collector's full walks, which otherwise hold the GIL for
    tens of ms every so often.
    """
    index = await anyio.to_thread.run_sync(MemoryIndex, notes)
    gc.freeze()
    return index
