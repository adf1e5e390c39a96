"""The list methods in pages: a long-lived daemon's lists outgrow one reply."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from harness import InProcessDaemon

from rosterd.client import RpcError

pytestmark = pytest.mark.anyio

Lister = Callable[[int | None, str | None], Awaitable[Sequence[Any]]]


async def paged(lister: Lister, limit: int) -> list[list[str]]:
    """Every page of *lister*, newest page first, each page's ids oldest first."""
    pages: list[list[str]] = []
    before: str | None = None
    while True:
        page = [item.id for item in await lister(limit, before)]
        pages.append(page)
        if len(page) < limit:
            return pages
        before = page[0]


async def check_pages(lister: Lister, everything: list[str]) -> None:
    assert [item.id for item in await lister(None, None)] == everything
    pages = await paged(lister, 3)
    assert [len(page) for page in pages] == [3, 3, 1]
    assert await lister(3, everything[0]) == []
    # Walking back page by page gives the whole list, in its order.
    assert [item for page in reversed(pages) for item in page] == everything
    assert [item.id for item in await lister(None, everything[2])] == everything[:2]
    assert [item.id for item in await lister(10_000, None)] == everything


async def test_runs_list_pages_back_from_the_newest(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        runs = [(await client.run_direct("ada", f"question {n}")).run for n in range(7)]
        await check_pages(client.runs_list, runs)


async def test_task_list_pages_back_from_the_newest(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        tasks = [(await client.task_submit("ada", "general", f"job {n}")).id for n in range(7)]
        await check_pages(client.task_list, tasks)


async def test_gate_list_pages_one_worker_s_gates(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        gates = []
        for n in range(7):
            gates.append((await client.gate_file("ada", f"approve {n}?")).id)
            await client.gate_file("grace", f"grace's {n}?")

        async def ada_s(limit: int | None, before: str | None) -> Sequence[Any]:
            return await client.gate_list("ada", limit, before)

        await check_pages(ada_s, gates)
        with pytest.raises(RpcError) as failure:
            # A gate of another worker is not in this list to start from.
            await client.gate_list("grace", 2, gates[-1])
    assert failure.value.code == 1003


async def test_memory_list_pages_the_notes_it_lists(served: InProcessDaemon) -> None:
    async with await served.client() as client:
        notes = [(await client.memory_add("ada", f"note {n}")).id for n in range(8)]
        await client.memory_forget("ada", notes[3], "wrong")
        live = [note for note in notes if note != notes[3]]

        async def live_notes(limit: int | None, before: str | None) -> Sequence[Any]:
            return await client.memory_list("ada", False, limit, before)

        await check_pages(live_notes, live)
        every = await client.memory_list("ada", True, 2, notes[5])
        with pytest.raises(RpcError) as failure:
            # Retired, so not among the live notes to start from.
            await client.memory_list("ada", False, 2, notes[3])
    assert [note.id for note in every] == notes[3:5]
    assert every[0].retired is not None
    assert failure.value.code == 1003


@pytest.mark.parametrize("method", ["runs.list", "task.list"])
@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"limit": 0}, -32602),
        ({"limit": 10_001}, -32602),
        ({"limit": 1, "before": "../x"}, -32602),
        ({"limit": 1, "before": "nothing-1"}, 1003),
        ({"before": "nothing-1"}, 1003),
    ],
)
async def test_a_bad_page_is_a_clear_error(
    served: InProcessDaemon, method: str, params: dict[str, object], code: int
) -> None:
    async with await served.client() as client:
        await client.run_direct("ada", "one run")
        with pytest.raises(RpcError) as failure:
            await client.call(method, params)
        # The connection goes on serving.
        listed = await client.runs_list(1)
    assert failure.value.code == code
    assert len(listed) == 1
