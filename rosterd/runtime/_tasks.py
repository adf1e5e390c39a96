"""Queued tasks on a bounded worker pool, and the gates that pause them.

A task runs once; filing a gate against its run pauses it, and resolving
that gate queues a continuation run whose briefing starts with the outcome.
Queued work is in the store, so a restart picks up what was queued or cut
off. Each pool worker claims the oldest task no live host holds and keeps
its lease renewed while the run goes on; where several hosts share the
store, a task whose host died is claimed again once its lease runs out.
"""

from __future__ import annotations

import logging

import anyio
import msgspec
from anyio.abc import TaskStatus

from .._errors import ConflictError, NotFoundError, RosterError, ShutdownError, StorageError
from ..compiler import Continuation, RunMeta, TurnInput, compile_run
from ..engines import DeltaSink, WaitSink
from ..org import Surface
from ..protocol import GateState, TaskState
from ..stores import ActiveRun, cut_off
from ._host import Host, TurnOutcome, failure_text
from ._waits import Signal, settled

log = logging.getLogger("rosterd.tasks")

# Where a task stays until someone acts: ``task.get`` with ``wait`` answers then.
_SETTLED: frozenset[str] = frozenset({"done", "failed", "paused"})
# How long a drain lets a look for a task under way in the store finish.
_CLAIM_GRACE_S = 5.0


async def _discard(_: str) -> None:
    pass


def _waits(task: TaskState, gate: GateState) -> bool:
    """Whether *task* waits on *gate*: paused, or done with the gate against
    its last run (filed after the run ended, its pause not written yet)."""
    if task.status == "done":
        return bool(task.runs) and task.runs[-1] == gate.run
    return task.status == "paused"


class TaskRunner:
    """Runs queued tasks, at most ``[daemon] task_workers`` at a time."""

    def __init__(self, host: Host, workers: int) -> None:
        self._host = host
        self._workers = workers
        # Whenever this host queues a task: idle workers claim at once
        # instead of at their next look at the store.
        self._queued = Signal()
        # Whenever this host changes a task or starts to drain: wakes the
        # callers waiting for a task to settle.
        self._changed = Signal()
        self._running = 0
        self._draining = False
        # Each idle worker's look for a task, which a drain cuts off once
        # ``_claim_grace_s`` ran out: a claim held up by the store (a lock, a
        # pool with no free connection, for as long as its timeout) must not
        # hold up the stop.
        self._looking: set[anyio.CancelScope] = set()
        # Moves of tasks by their gates, and a run's end (paused or done by
        # the gates against it), one at a time: each reads the task or its
        # gates and writes the task, and a move between the two would be
        # written over or missed.
        self._moving = anyio.Lock()
        # Gates whose task could not be moved (its write failed), in order,
        # and whether the start's look at every gated task failed: both
        # tried again at each look for work.
        self._unmoved: dict[str, None] = {}
        self._unsettled = False
        self._retry = 0.0  # when they may be tried again (anyio's clock)
        self.stopped = anyio.Event()

    def __repr__(self) -> str:
        return f"TaskRunner({self._workers} workers, {self._running} running)"

    @property
    def running(self) -> int:
        return self._running

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the pool until ``drain()``; what the store has queued goes first."""
        try:
            async with self._moving:
                await self._settle_gated()
            async with anyio.create_task_group() as tg:
                for _ in range(self._workers):
                    tg.start_soon(self._work)
                task_status.started()
        finally:
            # However the pool ends, later submits and resolutions stay queued.
            self.drain()
            self.stopped.set()

    def drain(self) -> None:
        """Start no new task; those running finish, queued ones stay queued.

        The idle workers stop waiting at once. A look under way in the store
        gets a moment to finish (a claim takes milliseconds): a query cut
        off leaves its connection in a state the pool can only throw away,
        with a warning from the driver on every such stop."""
        if self._draining:
            return
        self._draining = True
        grace = self._claim_grace_s
        log.debug("task workers draining: a look for a task under way gets %.1f s", grace)
        deadline = anyio.current_time() + grace
        for looking in self._looking:
            looking.deadline = min(looking.deadline, deadline)
        self._queued.notify()
        self._changed.notify()

    @property
    def _claim_grace_s(self) -> float:
        # Well within the drain, which must not run out waiting on it.
        return min(_CLAIM_GRACE_S, self._host.org.daemon.drain_s / 4)

    async def submit(self, worker: str, channel: str, text: str) -> TaskState:
        scope = self._host.org.scope(Surface.TASK, worker, channel)
        stores = self._host.stores
        task = await stores.tasks.submit(scope.worker, channel, text, self._host.clock())
        self._queued.notify()
        return task

    @property
    def draining(self) -> bool:
        """Whether the daemon stopped taking new work: waits answer then."""
        return self._draining

    async def settled(self, task_id: str, wait_s: float) -> TaskState:
        """*task_id* once it is done, failed or paused; as it is when *wait_s*
        ran out first, or when the daemon starts to drain."""
        tasks = self._host.stores.tasks
        return await settled(
            lambda: tasks.get(task_id),
            lambda task: task.status in _SETTLED,
            self._changed,
            wait_s,
            again_s=self._host.look_again_s,
            stopping=lambda: self._draining,
        )

    async def gate_filed(self, gate: GateState) -> None:
        """A gate against a finished task run pauses its task."""
        await self._follow(gate)

    async def gate_resolved(self, gate: GateState) -> None:
        """Resolving the last open gate against a paused task's run queues
        its continuation run, which shows the outcomes of all of them."""
        await self._follow(gate)

    async def _follow(self, gate: GateState) -> None:
        """Move the task *gate* is against where the gate says.

        The gate is the filing or the resolution: once it is durable it
        stands, and a task write that fails is logged, not answered as a
        failure (a client told 1008 would file the gate again), and tried
        again at the next look for work. Until then, resolving a gate
        continues a task whose pause was not written all the same.
        """
        async with self._moving:
            try:
                await self._move(gate)
            except StorageError as exc:
                self._unmoved[gate.id] = None
                log.warning(
                    "gate %s: its task (run %s) is not moved yet: %s", gate.id, gate.run, exc
                )

    async def _move(self, gate: GateState) -> None:
        """Pause the task of *gate*'s run while *gate* is open; queue its
        continuation once *gate* is resolved and no other gate against the
        run waits. Moves held up by another move: ``_moving`` is held."""
        stores = self._host.stores
        task = await stores.tasks.by_run(gate.run) if gate.run else None
        if task is None:
            return
        if gate.status == "open":
            if task.status == "done":
                await self._set(task, status="paused")
            return
        assert gate.run is not None
        if not _waits(task, gate) or await stores.gates.waiting_on(gate.run):
            return  # another gate against the run waits: the task too
        continuation = Continuation(
            gate=gate.id, summary=gate.summary, outcome=gate.outcome or "", note=gate.note
        )
        await self._set(task, status="queued", continuation=continuation)
        self._queued.notify()

    async def _catch_up(self) -> None:
        """Move the tasks whose move failed, at a look for work: the daemon
        catches up once the store takes writes again, and a store still
        failing costs one try a ``look_again_s``, however many workers look."""
        now = anyio.current_time()
        if not (self._unsettled or self._unmoved) or self._moving.locked() or now < self._retry:
            return
        self._retry = now + self._host.look_again_s
        async with self._moving:
            if self._unsettled:
                await self._settle_gated()
                if not self._unsettled:
                    log.info("tasks are where their gates say now")
            gates = self._host.stores.gates
            for gate_id in list(self._unmoved):
                try:
                    await self._move(await gates.get(gate_id))
                except StorageError as exc:
                    # Logged when it first failed: each try would repeat it.
                    log.debug("gate %s: its task is still not moved: %s", gate_id, exc)
                    return
                except RosterError as exc:
                    # Not the store failing: trying again would not help, and
                    # the look for work must go on.
                    log.error("gate %s: its task cannot be moved: %s", gate_id, exc)
                else:
                    log.info("gate %s: its task is where the gate says now", gate_id)
                del self._unmoved[gate_id]

    async def _settle_gated(self) -> None:
        """Put each paused or done task where the gates against its runs say.

        A gate and the task it pauses or continues are two writes: a kill
        between them leaves a task paused although every gate against it
        is resolved, or done although a gate filed against its last run
        waits. Looked at before any task is claimed, ``_moving`` held; a
        store that cannot be written yet is looked at again at the next
        look for work.
        """
        stores = self._host.stores
        again, self._unsettled = self._unsettled, False
        try:
            # What waits, what is paused, and the gates against paused
            # tasks: not every gate and task ever stored.
            waiting: dict[str, GateState] = {}
            for gate in await stores.gates.open_against_runs():
                assert gate.run is not None
                waiting.setdefault(gate.run, gate)
            tasks = await stores.tasks.gated(waiting)
            paused = {run for task in tasks if task.status == "paused" for run in task.runs}
            against: dict[str, list[GateState]] = {}
            for gate in await stores.gates.against(paused):
                assert gate.run is not None
                against.setdefault(gate.run, []).append(gate)
            for task in tasks:
                if task.status == "done":
                    log.warning("task %s: paused, a gate against its last run waits", task.id)
                    await self._move(waiting[task.runs[-1]])
                    continue
                gates = [gate for run in task.runs for gate in against.get(run, ())]
                if gates and all(gate.status == "resolved" for gate in gates):
                    last = max(gates, key=lambda gate: gate.resolved_at or 0.0)
                    log.warning("task %s: continued, gate %s is resolved", task.id, last.id)
                    await self._move(last)
        except StorageError as exc:
            self._unsettled = True
            # Logged when it first failed: each try would repeat it.
            level = logging.DEBUG if again else logging.ERROR
            log.log(level, "tasks could not be put where their gates say yet: %s", exc)

    async def _work(self) -> None:
        host = self._host
        while not self._draining:
            task = await self._claim()
            if task is None:
                continue
            if self._draining:
                # Claimed as the drain began: given back at once, for the next
                # start or another host, rather than held until its lease runs out.
                await self._give_back(task.id)
                return
            if host.leases.runs_task(task.id):
                # Its lease ran out while this host's keeper was held up, and
                # this claim renewed it: the worker running it goes on. A second
                # run here would cut the first off, and the first, leaving,
                # would give up the lease the second runs under.
                log.warning("task %s: claimed again while this host runs it", task.id)
                continue
            self._running += 1
            try:
                async with host.leases.task(task.id):
                    await self._run_guarded(task.id)
            except ConflictError as exc:
                # The other host runs the task again: nothing here to record.
                log.error("task %s: %s; left to the host that runs it now", task.id, exc)
            finally:
                self._running -= 1

    async def _claim(self) -> TaskState | None:
        """A task this host now holds; ``None`` after waiting for one to be
        queued, or when the drain began meanwhile. A claim the drain cuts off
        (held up past its grace) that the store made anyway leaves a lease
        that runs out, as a stopped host's does."""
        host = self._host
        with anyio.CancelScope() as looking:
            self._looking.add(looking)
            try:
                # Taken before the claim: a task queued while it runs still wakes us.
                queued = self._queued.next()
                await self._catch_up()
                lease_s = host.org.daemon.lease_s
                now = host.clock()
                log.debug("looking for a task to run")
                try:
                    task = await host.stores.tasks.claim(host.leases.holder, now, now + lease_s)
                except StorageError as exc:
                    # The store is unreachable: look again later, the pool goes on.
                    log.warning("could not claim a task: %s", exc)
                    task = None
                if task is not None:
                    return task
                log.debug("no task to run")
                # Other hosts' tasks are found by looking again now and then.
                with anyio.move_on_after(host.look_again_s):
                    await queued.wait()
            finally:
                self._looking.discard(looking)
        return None

    async def _give_back(self, task_id: str) -> None:
        try:
            await self._host.stores.tasks.release(task_id, self._host.leases.holder)
        except StorageError as exc:
            log.warning("task %s: not given back, its lease runs out: %s", task_id, exc)
        else:
            log.info("task %s: claimed as the drain began, given back", task_id)

    async def _run_guarded(self, task_id: str) -> None:
        # Whatever one run raises fails that task alone: the pool, the other
        # tasks and the daemon go on.
        try:
            await self._run(await self._host.stores.tasks.get(task_id))
        except ConflictError:
            # Another host took the task over (this one stalled past its
            # lease): what becomes of it is that host's to record.
            raise
        except Exception as exc:
            unexpected = None if isinstance(exc, RosterError) else exc
            log.error("task %s failed: %s", task_id, failure_text(exc), exc_info=unexpected)
            try:
                task = await self._host.stores.tasks.get(task_id)
                if task.status in ("queued", "running"):
                    await self._set(task, status="failed", error=failure_text(exc))
            except RosterError as again:
                log.error("task %s: its failure could not be recorded: %s", task_id, again)

    async def _run(self, task: TaskState) -> None:
        host = self._host
        now = host.clock()
        if task.status == "running" and task.runs:
            # Claimed again after its host stopped or died: that run is over.
            await self._interrupted(task.runs[-1], now)
        run_id = host.runs.new_id("t", now)
        task = await self._set(task, status="running", runs=(*task.runs, run_id))
        try:
            info = host.new_run(run_id, Surface.TASK, task.worker, task.channel, now, task=task.id)
            async with host.run(info) as run:
                outcome = await self._answer(task, run, now)
        except ConflictError:
            raise  # another host runs the task now: nothing of this run to record
        except ShutdownError:
            # Queued again on disk: the next start runs it under a new run id.
            log.warning("task %s run %s interrupted by the stop", task.id, run_id)
            await self._set(task, status="queued")
            return
        except Exception as exc:
            # An unexpected error gets its traceback in the log; ours do not.
            unexpected = None if isinstance(exc, RosterError) else exc
            log.warning(
                "task %s run %s failed: %s",
                task.id,
                run_id,
                failure_text(exc),
                exc_info=unexpected,
            )
            await self._set(task, status="failed", error=failure_text(exc))
            return
        # A move by a gate too: a resolution between the look and the write
        # would find the task still running, and leave it paused for good.
        async with self._moving:
            waiting = await host.stores.gates.waiting_on(run_id)
            await self._set(task, status="paused" if waiting else "done", reply=outcome.reply.text)

    async def _answer(self, task: TaskState, run: ActiveRun, now: float) -> TurnOutcome:
        """The task's one turn: its text, and a continuation's gate outcome."""
        host = self._host
        org = host.org
        scope = org.scope(Surface.TASK, task.worker, task.channel)
        fresh = TurnInput(task.text, "task", continuation=task.continuation)
        turn = await host.turn_input(task.worker, fresh, await self._paused_since(task))
        meta = RunMeta(run=run.info.id, turn=1, now=now)
        return await host.run_turn(
            run,
            org.engine_chain(task.worker),
            lambda: compile_run(org, scope, turn, meta),
            [],
            _discard,
        )

    async def _paused_since(self, task: TaskState) -> float | None:
        """For a continuation, when the run its gates were filed against
        began: the gates resolved since then come with their outcomes (the
        continuation's own is its first line). ``None`` for a first run."""
        if task.continuation is None:
            return None
        stores = self._host.stores
        gate = await stores.gates.get(task.continuation.gate)
        if gate.run is None:
            return None
        return (await self._host.runs.info(gate.run)).created_at

    async def _interrupted(self, run_id: str, now: float) -> None:
        runs = self._host.runs
        try:
            info = await runs.info(run_id)
        except NotFoundError:
            return  # its host stopped before the run was created
        if info.status == "open":
            log.warning("task %s: run %s was cut off by its host's stop", info.task, run_id)
            await runs.write_info(cut_off(info, now))

    async def _set(self, task: TaskState, **changes: object) -> TaskState:
        updated = msgspec.structs.replace(task, updated_at=self._host.clock(), **changes)
        stored = await self._host.stores.tasks.update(updated)
        self._changed.notify()
        return stored


async def direct_run(
    host: Host,
    run_id: str,
    worker: str,
    text: str,
    sender: str,
    on_delta: DeltaSink,
    on_wait: WaitSink | None = None,
) -> TurnOutcome:
    """An ad-hoc run outside any channel: one compilation, one engine call."""
    org = host.org
    scope = org.scope(Surface.DIRECT, worker, None)
    now = host.clock()
    async with host.run(host.new_run(run_id, Surface.DIRECT, worker, None, now)) as run:
        turn = await host.turn_input(worker, TurnInput(text, sender))
        meta = RunMeta(run=run_id, turn=1, now=now)
        return await host.run_turn(
            run,
            org.engine_chain(worker),
            lambda: compile_run(org, scope, turn, meta),
            [],
            on_delta,
            on_wait=on_wait,
        )
