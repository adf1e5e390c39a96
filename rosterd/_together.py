"""Writes to several places at once that fail as the one that failed."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio


async def together(*writes: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Run *writes* side by side, so that they wait for the disk (or the
    database) once between them, not once each.

    If any fail, the first failure is raised as itself, not inside an
    exception group: a caller handles a ``StorageError`` (or an encoding
    error) alike whether it came from one write or from several.
    """
    if len(writes) == 1:
        await writes[0]()
        return
    try:
        async with anyio.create_task_group() as tg:
            for write in writes:
                tg.start_soon(write)
    except BaseExceptionGroup as group:
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
