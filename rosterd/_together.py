"""Writes to several places at once that fail as the one that failed."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio


async def together(*writes: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Run *writes* side by side, so that they wait for the disk (or the
    database) once between them, not once each.

    Each runs to its end whatever becomes of the others, so that once this
    returns or raises, what each wrote is settled. If any failed, the
    first of them in the order given is raised as itself, not inside an
    exception group: a caller handles a ``StorageError`` (or an encoding
    error) alike whether it came from one write or from several.
    """
    if len(writes) == 1:
        await writes[0]()
        return
    failures: list[Exception | None] = [None] * len(writes)

    async def run(i: int) -> None:
        try:
            await writes[i]()
        except Exception as exc:
            failures[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(len(writes)):
            tg.start_soon(run, i)
    for failure in failures:
        if failure is not None:
            raise failure
