"""What the daemon tells the operators' own tools about its turns.

One ``Telemetry`` per daemon holds the Prometheus metrics, the OpenTelemetry
tracer, both or neither. The turn path asks it for a ``TurnWatch`` per turn
and reports what happens (compile, commit, each engine call, each tool call,
the outcome); a watch with nothing configured does nothing, so a daemon
without ``[metrics]`` or ``[telemetry]`` pays a few attribute checks a turn
and imports neither library.

Labels are bounded: surface, worker, engine kind, verdict, reason and
outcome come from the org and from fixed sets, never a run, session, gate
or user id, and never text.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal, get_args

import anyio
from anyio.abc import TaskStatus as Started

from .._errors import EngineError, RosterError
from ..compiler import ToolStatus
from ..engines import DeltaSink, EngineReply
from ..org import EngineConfig
from ..protocol import CallCost, ChatMessage, RunInfo, TaskStatus, Verdict

if TYPE_CHECKING:
    from ..stores import TaskStore
    from ._metrics import Metrics, TurnSeries
    from ._tracing import Span, Tracing

log = logging.getLogger("rosterd.observe")

OutcomeLabel = Literal["ok", "compile_failed", "engine_failed", "interrupted", "failed"]
RolloverReason = Literal["session_chars", "provider_too_long"]
# How often the task gauge is read from the store.
_TASK_COUNTS_S = 10.0
# Each status has its series from the start, 0 while no task has it.
_TASK_STATUSES: tuple[TaskStatus, ...] = get_args(TaskStatus)


class Telemetry:
    """The daemon's metrics and tracer; either may be ``None``."""

    def __init__(self, metrics: Metrics | None = None, tracing: Tracing | None = None) -> None:
        self.metrics = metrics
        self.tracing = tracing

    def __repr__(self) -> str:
        return f"Telemetry(metrics={self.metrics!r}, tracing={self.tracing!r})"

    def turn(self, info: RunInfo, engine: EngineConfig) -> TurnWatch:
        """A watch over one turn (or one task or direct run) of *info*."""
        return TurnWatch(self.metrics, self.tracing, info, engine)

    def rolled_over(self, reason: RolloverReason) -> None:
        if self.metrics is not None:
            self.metrics.rollovers.labels(reason).inc()

    def waited(self, seconds: float) -> None:
        """A turn waited *seconds* for its session (turns before it, a lease)."""
        if self.metrics is not None:
            self.metrics.queue_wait.observe(seconds)

    def watch(self, sessions: Callable[[], int], connections: Callable[[], int]) -> None:
        """Read the warm sessions and open connections at each scrape."""
        if self.metrics is not None:
            self.metrics.sessions_warm.set_function(sessions)
            self.metrics.connections.set_function(connections)

    async def keep_task_counts(
        self, tasks: TaskStore, *, task_status: Started[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep the task gauge up to date from the store, until cancelled;
        started once the first count is in, so that a scrape as soon as the
        daemon is ready finds the tasks."""
        metrics = self.metrics
        if metrics is None:
            task_status.started()
            return
        await _count_tasks(metrics, tasks)
        task_status.started()
        while True:
            await anyio.sleep(_TASK_COUNTS_S)
            await _count_tasks(metrics, tasks)


async def _count_tasks(metrics: Metrics, tasks: TaskStore) -> None:
    try:
        counts = await tasks.counts()
    except RosterError as exc:  # a gauge never stops the daemon
        log.warning("task counts for the metrics failed: %s", exc)
        return
    for status in _TASK_STATUSES:
        metrics.tasks.labels(status).set(counts.get(status, 0))


NO_TELEMETRY = Telemetry()


class TurnWatch:
    """What one turn reports: its phases, engine calls, tool calls and outcome."""

    def __init__(
        self, metrics: Metrics | None, tracing: Tracing | None, info: RunInfo, engine: EngineConfig
    ) -> None:
        self._metrics = metrics
        self._tracing = tracing
        self._info = info
        self.engine = engine
        self.series: TurnSeries | None = None
        if metrics is not None:
            self.series = metrics.series(info.surface, info.worker, engine.kind)
        self._span = tracing.turn_span(info) if tracing is not None else None
        self._started = time.perf_counter()

    def __repr__(self) -> str:
        return f"TurnWatch({self._info.id!r})"

    def numbered(self, turn: int) -> None:
        """The turn's number, once its compilation has one."""
        if self._span is not None:
            self._span.set_attribute("rosterd.turn", turn)

    @contextmanager
    def phase(self, name: Literal["compile", "commit"]) -> Iterator[None]:
        """A span for one phase of the turn (the compilation, a store commit)."""
        if self._tracing is None or self._span is None:
            yield
            return
        with self._tracing.phase(self._span, name):
            yield

    def engine_call(self, step: int) -> CallWatch:
        span = None
        if self._tracing is not None and self._span is not None:
            span = self._tracing.chat_span(self._span, self._info, self.engine, step)
        return CallWatch(self, self._metrics, self._tracing, span)

    def billed(self, cost: CallCost | None) -> None:
        """An engine call's cost, when its model has a price."""
        if self._metrics is not None and cost is not None:
            labels = (self._info.worker, self.engine.kind, cost.price.model)
            self._metrics.cost.labels(*labels).inc(cost.usd)

    def cache(self, verdict: Verdict) -> None:
        if self._metrics is not None and verdict not in ("hit", "unmeasured"):
            self._metrics.cache_misses.labels(verdict).inc()

    def tool(self, name: str | None, call_id: str, status: ToolStatus) -> None:
        """A tool call answered, by the gateway or by rosterd; *name* is
        ``None`` for a call that names no tool the worker was given."""
        if self._tracing is not None and self._span is not None:
            self._tracing.tool_span(self._span, name, call_id, status)

    def gateway(self, status: ToolStatus) -> None:
        """A tool call the gateway answered."""
        if self._metrics is not None:
            self._metrics.gateway_calls.labels(status).inc()

    def finish(self, outcome: OutcomeLabel) -> None:
        if self.series is not None:
            self.series.ended(outcome).inc()
            self.series.duration.observe(time.perf_counter() - self._started)
        if self._tracing is not None and self._span is not None:
            self._tracing.end(self._span, None if outcome == "ok" else outcome)


class CallWatch:
    """One engine call: the time to its first token, its usage, or its error."""

    def __init__(
        self,
        turn: TurnWatch,
        metrics: Metrics | None,
        tracing: Tracing | None,
        span: Span | None,
    ) -> None:
        self._metrics = metrics
        self._series = turn.series
        self._tracing = tracing
        self._engine = turn.engine
        self._span = span
        self._started = time.perf_counter()
        self._first = False

    def __repr__(self) -> str:
        return f"CallWatch({self._engine.kind})"

    def sink(self, on_delta: DeltaSink) -> DeltaSink:
        """*on_delta*, noting when the first piece of the reply arrives."""
        series = self._series
        if series is None:
            return on_delta

        async def first_noted(text: str) -> None:
            if not self._first:
                self._first = True
                series.first_token.observe(time.perf_counter() - self._started)
            await on_delta(text)

        return first_noted

    def answered(self, reply: EngineReply, added: Sequence[ChatMessage]) -> None:
        """The call returned *reply*; *added* is what this call added to the request."""
        usage, series = reply.usage, self._series
        if series is not None and usage is not None:
            series.input.inc(max(usage.input_tokens - usage.cached_input_tokens, 0))
            series.cached.inc(usage.cached_input_tokens)
            series.cache_write.inc(usage.cache_write_tokens)
            series.output.inc(usage.output_tokens)
        if self._tracing is not None and self._span is not None:
            self._tracing.answered(self._span, self._engine, reply, added)

    def failed(self, error: EngineError | None) -> None:
        """The call failed with *error*, or was cut short (``None``)."""
        code = "interrupted" if error is None else _error_code(error)
        if self._metrics is not None:
            self._metrics.engine_errors.labels(self._engine.kind, code).inc()
        if self._tracing is not None and self._span is not None:
            self._tracing.end(self._span, code)


def _error_code(error: EngineError) -> str:
    """A bounded label for *error*: the HTTP status, or what kind of failure."""
    if error.status is not None:
        return str(error.status)
    if error.context_exceeded:
        return "context_exceeded"
    return "retryable" if error.retryable else "failed"
