"""Tasks in the database: queued, running, paused, done, failed."""

from __future__ import annotations

from collections.abc import Collection

import msgspec

from ..._errors import NotFoundError, StaleError
from ...protocol import TaskState, TaskStatus
from ._db import Database, Numbered, encode, scalar

_task = msgspec.json.Decoder(TaskState)

_NEXT_TASK = "SELECT nextval('task_numbers')"
_SUBMIT = (
    "INSERT INTO tasks (n, status, submitted_at, change, record)"
    " VALUES (%s, %s, %s, nextval('state_changes'), %s)"
)
# A task this store claimed is updated only while its claim holds: once
# the holder stalled past its lease and another host claimed the task, the
# stalled host's late update (its run's outcome, a requeue) would write
# over what the other host recorded, its run dropped from ``runs``.
_UPDATE = (
    "UPDATE tasks SET status = %(status)s, submitted_at = %(at)s,"
    " change = nextval('state_changes'), record = %(record)s"
    " WHERE n = %(n)s AND (%(holder)s::text IS NULL OR holder = %(holder)s)"
)
# A run names the task it was started for; the latest update wins, as in
# the file backend's index.
_RUNS = (
    "INSERT INTO task_runs (run, task) SELECT run, %s FROM unnest(%b::text[]) AS r (run)"
    " ON CONFLICT (run) DO UPDATE SET task = excluded.task"
)
_GET = "SELECT record FROM tasks WHERE n = %s"
_TASKS = Numbered("task", "task", _task, _GET)
# On task_runs' primary key, then tasks' own.
_BY_RUN = "SELECT t.record FROM task_runs r JOIN tasks t ON t.n = r.task WHERE r.run = %s"
_ALL = "SELECT record FROM tasks"
# From the index tasks_by_status alone, never a task's record: what a
# status count costs is the index, not the records of the whole history.
_COUNTS = "SELECT status, count(*) FROM tasks GROUP BY status"
# The paused tasks on the partial index tasks_paused, and the done ones
# through task_runs' primary key, each row with the run that found it.
_GATED = (
    "SELECT NULL, record FROM tasks WHERE status = 'paused'"
    " UNION ALL SELECT r.run, t.record FROM task_runs r JOIN tasks t ON t.n = r.task"
    " WHERE r.run = ANY(%b::text[]) AND t.status = 'done'"
)
# The oldest task to run that no live host holds, on the partial index
# tasks_pending (only tasks still to run, however many have finished);
# SKIP LOCKED: hosts claiming at once each get a different one, or none.
_CLAIM = (
    "UPDATE tasks SET holder = %(holder)s, lease_until = %(until)s WHERE n = ("
    " SELECT n FROM tasks WHERE status IN ('queued', 'running')"
    " AND (lease_until IS NULL OR lease_until <= %(now)s)"
    " ORDER BY submitted_at, n LIMIT 1 FOR UPDATE SKIP LOCKED)"
    " RETURNING record"
)
_RENEW = "UPDATE tasks SET lease_until = %s WHERE n = %s AND holder = %s"
_RELEASE = "UPDATE tasks SET holder = NULL, lease_until = NULL WHERE n = %s AND holder = %s"


def _submission_order(tasks: list[TaskState]) -> list[TaskState]:
    # Sorted here, as the file backend sorts: ids compare as strings.
    return sorted(tasks, key=lambda t: (t.submitted_at, t.id))


class PostgresTasks:
    """All tasks in table ``tasks``, each change a whole new state."""

    def __init__(self, db: Database) -> None:
        self._db = db
        # The holder of each task claimed here and not yet released, by number.
        self._claims: dict[int, str] = {}

    def __repr__(self) -> str:
        return f"PostgresTasks({self._db.where!r})"

    async def submit(self, worker: str, channel: str, text: str, at: float) -> TaskState:
        async with self._db.connection("submit a task") as conn:
            # A number taken is never handed out again, even if the insert fails.
            n = await scalar(conn, _NEXT_TASK)
            task = TaskState(
                id=f"task-{n}",
                worker=worker,
                channel=channel,
                text=text,
                submitted_at=at,
                updated_at=at,
            )
            await conn.execute(_SUBMIT, (n, task.status, at, encode(task)))
        return task

    async def update(self, task: TaskState) -> TaskState:
        """Store *task*'s new state as a whole; raises ``NotFoundError`` for a
        task never submitted (its number is the database's to hand out), and
        ``StaleError`` for one claimed here that another host claimed since
        (nothing written: that host records what becomes of it)."""
        n = _TASKS.number(task.id)
        holder = self._claims.get(n)
        params = {
            "status": task.status,
            "at": task.submitted_at,
            "record": encode(task),
            "n": n,
            "holder": holder,
        }
        async with self._db.transaction("update a task") as conn:
            cursor = await conn.execute(_UPDATE, params)
            if cursor.rowcount == 0 and holder is not None:
                raise StaleError(f"task {task.id!r}: another host claimed it since this one did")
            if cursor.rowcount == 0:
                raise NotFoundError("task", task.id)
            if task.runs:
                await conn.execute(_RUNS, (n, list(task.runs)))
        return task

    async def get(self, task_id: str) -> TaskState:
        """Raises ``NotFoundError`` for an unknown id."""
        return await _TASKS.get(self._db, task_id)

    async def by_run(self, run: str) -> TaskState | None:
        row = await self._db.fetchone("read a task", _BY_RUN, (run,))
        return None if row is None else self._db.decode(_task, row[0])

    async def all(self) -> list[TaskState]:
        """Every task, in submission order."""
        rows = await self._db.fetchall("read tasks", _ALL)
        return _submission_order([self._db.decode(_task, row[0]) for row in rows])

    async def counts(self) -> dict[TaskStatus, int]:
        rows = await self._db.fetchall("count tasks", _COUNTS)
        return {status: int(count) for status, count in rows}

    async def gated(self, runs: Collection[str]) -> list[TaskState]:
        rows = await self._db.fetchall("read paused tasks", _GATED, (list(runs),))
        tasks = ((run, self._db.decode(_task, record)) for run, record in rows)
        # A done task is found once per run given; kept once, by its last.
        return _submission_order([t for run, t in tasks if run is None or t.runs[-1:] == (run,)])

    async def claim(self, holder: str, now: float, until: float) -> TaskState | None:
        params = {"holder": holder, "until": until, "now": now}
        row = await self._db.fetchone("claim a task", _CLAIM, params)
        if row is None:
            return None
        task = self._db.decode(_task, row[0])
        self._claims[_TASKS.number(task.id)] = holder
        return task

    async def renew(self, task_id: str, holder: str, until: float) -> bool:
        async with self._db.connection("renew a task's lease") as conn:
            cursor = await conn.execute(_RENEW, (until, _TASKS.number(task_id), holder))
            return cursor.rowcount == 1

    async def release(self, task_id: str, holder: str) -> None:
        n = _TASKS.number(task_id)
        try:
            async with self._db.connection("release a task") as conn:
                await conn.execute(_RELEASE, (n, holder))
        finally:
            # Given up even when the database is out of reach: the lease runs out.
            if self._claims.get(n) == holder:
                del self._claims[n]
