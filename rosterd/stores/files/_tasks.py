"""Queued tasks and their lifecycle: queued, running, paused, done, failed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from pathlib import Path

from ...protocol import TaskState, TaskStatus
from ._jsonl import StateTable
from ._leases import Leases

_PENDING = ("queued", "running")


def _submission_order(tasks: Iterable[TaskState]) -> list[TaskState]:
    return sorted(tasks, key=lambda t: (t.submitted_at, t.id))


def _gated(task: TaskState, runs: set[str]) -> bool:
    if task.status == "done":
        return bool(task.runs) and task.runs[-1] in runs
    return task.status == "paused"


class FileTasks:
    """All tasks in ``tasks.jsonl``, each change appended as a whole state."""

    def __init__(self, table: StateTable[TaskState]) -> None:
        self._table = table
        # Gates find their task by run: an index, not a scan of every task.
        self._by_run = {run: task.id for task in table.values() for run in task.runs}
        # Claims look only at what may run: queued, or running when the
        # daemon stopped (no lease survives a restart).
        self._pending = {task.id for task in table.values() if task.status in _PENDING}
        self._leases = Leases()

    def __repr__(self) -> str:
        return f"FileTasks({len(self._table)} tasks)"

    @classmethod
    async def open(cls, path: Path) -> FileTasks:
        return cls(await StateTable.open(path, TaskState, "task", "task"))

    async def submit(self, worker: str, channel: str, text: str, at: float) -> TaskState:
        task = await self._table.insert(
            lambda key: TaskState(
                id=key, worker=worker, channel=channel, text=text, submitted_at=at, updated_at=at
            )
        )
        self._pending.add(task.id)
        return task

    async def update(self, task: TaskState) -> TaskState:
        await self._table.put(task)
        for run in task.runs:
            self._by_run[run] = task.id
        if task.status in _PENDING:
            self._pending.add(task.id)
        else:
            self._pending.discard(task.id)
        return task

    async def get(self, task_id: str) -> TaskState:
        return self._table.get(task_id)

    async def by_run(self, run: str) -> TaskState | None:
        task_id = self._by_run.get(run)
        return None if task_id is None else self._table.find(task_id)

    async def all(self) -> list[TaskState]:
        return _submission_order(self._table.values())

    async def counts(self) -> dict[TaskStatus, int]:
        # Counted from the table rather than kept as counters: a failed
        # write puts its task's previous state back, and counters would
        # have to follow it.
        return dict(Counter(task.status for task in self._table.values()))

    async def gated(self, runs: Collection[str]) -> list[TaskState]:
        # Every task is in memory: looking at each costs no read.
        wanted = set(runs)
        return _submission_order(t for t in self._table.values() if _gated(t, wanted))

    async def claim(self, holder: str, now: float, until: float) -> TaskState | None:
        tasks = (self._table.find(task_id) for task_id in self._pending)
        free = [t for t in tasks if t is not None and self._leases.free(t.id, now)]
        if not free:
            return None
        task = min(free, key=lambda t: (t.submitted_at, t.id))
        self._leases.take(task.id, holder, now, until)
        return task

    async def renew(self, task_id: str, holder: str, until: float) -> bool:
        return self._leases.renew(task_id, holder, until)

    async def release(self, task_id: str, holder: str) -> None:
        self._leases.release(task_id, holder)

    async def aclose(self) -> None:
        await self._table.aclose()
