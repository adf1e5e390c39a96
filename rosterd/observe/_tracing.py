"""OpenTelemetry traces over OTLP/HTTP, on the GenAI semantic conventions.

Each turn or run is one trace: a span ``invoke_agent {worker}`` whose
children are ``compile`` and ``commit`` (the writes that precede a send),
``chat {model}`` per engine call with the ``gen_ai.*`` request and usage
attributes, and ``execute_tool {name}`` per tool call.

A turn only notes names, times and attributes in plain records. A child
process (``python -m rosterd.observe``, kept as ``rosterd._child`` keeps
the daemon's children) makes the SDK's spans of them and exports them with
the OTLP exporter: encoding spans takes about a tenth of an echo turn's
CPU, and in a thread it would hold the interpreter's lock that turns wait
for. Twice a second the daemon writes what finished since to the child's
standard input, one JSON line (``_spans.SpanRecord``); the child says on
its standard output how many spans each of its batches sent or dropped. A
finished turn goes into a bounded queue; one that finds it full, or whose
batch the collector does not take within ``timeout_s`` (down, slow,
refusing), or that a child took with it when it died, is dropped and its
spans counted (``rosterd_telemetry_dropped_total``).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager

import anyio
import anyio.lowlevel
import msgspec
from anyio.abc import Process, TaskStatus
from opentelemetry.trace import SpanKind

from .._child import lines, log_exit, run_again, spawn, stop
from ..compiler import ToolStatus
from ..engines import EngineReply
from ..org import EngineConfig, TelemetryConfig
from ..protocol import ChatMessage, RunInfo
from ._spans import Attributes, SpanRecord

log = logging.getLogger("rosterd.observe")

_NAME = "span exporter"
_QUEUE_SPANS = 8192
_BATCH_DELAY_S = 0.5
# How long a child whose output ended, or that is stopped, has to exit.
_EXIT_S = 1.0
_encode = msgspec.json.Encoder().encode


class Span:
    """One span as a turn notes it: a name, times, attributes, an error."""

    __slots__ = ("attributes", "end", "error", "kind", "name", "start", "trace")

    def __init__(
        self, trace: _Trace | None, name: str, kind: SpanKind, attributes: Attributes
    ) -> None:
        self.trace = trace if trace is not None else _Trace(self)
        self.name = name
        self.kind = kind
        self.attributes = attributes
        self.start = time.time_ns()
        self.end = 0
        self.error: str | None = None
        if trace is not None:
            trace.children.append(self)

    def __repr__(self) -> str:
        return f"Span({self.name!r})"

    def set_attribute(self, key: str, value: str | int) -> None:
        self.attributes[key] = value

    def finish(self, error: str | None = None) -> None:
        self.end = time.time_ns()
        self.error = error


class _Trace:
    """A turn's root span and its children, in the order they started."""

    __slots__ = ("children", "root")

    def __init__(self, root: Span) -> None:
        self.root = root
        self.children: list[Span] = []

    def __len__(self) -> int:
        return 1 + len(self.children)


class Tracing:
    """The tracer of one daemon, and the export behind it."""

    def __init__(
        self,
        config: TelemetryConfig,
        environ: Mapping[str, str],
        dropped: Callable[[int], None],
        withheld: Collection[str] = (),
    ) -> None:
        """Spans exported as *config* says, by a child whose environment is
        *environ* but *withheld* (the secrets the org names); what is
        dropped is counted with *dropped*."""
        self.config = config
        name = config.service_name or environ.get("OTEL_SERVICE_NAME") or "rosterd"
        # Without an endpoint the exporter reads OTEL_EXPORTER_OTLP_* itself.
        child_environ = {
            **os.environ,
            **environ,
            "ROSTER_OTLP_ENDPOINT": config.otlp_endpoint or "",
            "ROSTER_OTLP_TIMEOUT_S": str(config.timeout_s),
            "ROSTER_OTLP_SERVICE": name,
        }
        command = [sys.executable, "-m", "rosterd.observe"]
        self._export = _ExportApart(command, child_environ, withheld, dropped, config.timeout_s)

    def __repr__(self) -> str:
        return f"Tracing({self.config.otlp_endpoint!r})"

    def turn_span(self, info: RunInfo) -> Span:
        attributes: Attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": info.worker,
            "gen_ai.conversation.id": info.id,
            "rosterd.surface": info.surface,
        }
        if info.channel is not None:
            attributes["rosterd.channel"] = info.channel
        return Span(None, f"invoke_agent {info.worker}", SpanKind.INTERNAL, attributes)

    @contextmanager
    def phase(self, parent: Span, name: str) -> Iterator[None]:
        span = Span(parent.trace, name, SpanKind.INTERNAL, {})
        try:
            yield
        except BaseException as exc:
            span.finish(type(exc).__name__)
            raise
        span.finish()

    def chat_span(self, parent: Span, info: RunInfo, engine: EngineConfig, step: int) -> Span:
        model = _model(engine)
        attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": engine.kind,
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": engine.max_tokens,
            "gen_ai.conversation.id": info.id,
            "rosterd.step": step,
        }
        return Span(parent.trace, f"chat {model}", SpanKind.CLIENT, attributes)

    def answered(
        self, span: Span, engine: EngineConfig, reply: EngineReply, added: Sequence[ChatMessage]
    ) -> None:
        """End a ``chat`` span with what the provider reported (and, if
        asked, what the call added to the request, and the reply)."""
        attributes = span.attributes
        # The configured model: the engines do not read the provider's own name of it.
        attributes["gen_ai.response.model"] = _model(engine)
        usage = reply.usage
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_input_tokens
            attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if reply.calls:
            attributes["gen_ai.response.finish_reasons"] = ("tool_calls",)
        if self.config.capture_content:
            attributes["gen_ai.input.messages"] = _messages(added)
            output = [ChatMessage(role="assistant", content=reply.text)]
            attributes["gen_ai.output.messages"] = _messages(output)
        span.finish()

    def tool_span(self, parent: Span, name: str | None, call_id: str, status: ToolStatus) -> None:
        """A span for one tool call; without *name* (a call naming no tool
        of the worker's, whose name is free text) it is ``execute_tool``."""
        attributes: Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.call.id": call_id,
            "rosterd.tool.status": status,
        }
        if name is not None:
            attributes["gen_ai.tool.name"] = name
        title = "execute_tool" if name is None else f"execute_tool {name}"
        span = Span(parent.trace, title, SpanKind.INTERNAL, attributes)
        span.finish(None if status == "ok" else status)

    def end(self, span: Span, error: str | None) -> None:
        """End *span*; the root span of a turn hands its trace to the export."""
        if error is not None:
            span.attributes["error.type"] = error
        span.finish(error)
        if span.trace.root is span:
            self._export.put(span.trace)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the exporting child until ``aclose``; started at once."""
        await self._export.run(task_status=task_status)

    async def aclose(self) -> None:
        """Send what is queued (bounded by the export timeout), then stop."""
        await self._export.aclose()


def _model(engine: EngineConfig) -> str:
    """The model a span names: the configured one, or the engine kind (echo)."""
    return engine.model or engine.kind


def _messages(messages: Sequence[ChatMessage]) -> str:
    """*messages* in the conventions' shape: role and text parts, as JSON."""
    return _encode(
        [{"role": m.role, "parts": [{"type": "text", "content": m.content}]} for m in messages]
    ).decode()


class _ExportApart:
    """Finished turns, queued and bounded, written to the exporting child.

    Everything here runs on the event loop: ending a turn costs one append,
    and the queue is written out on a timer, never per turn.
    """

    def __init__(
        self,
        command: list[str],
        environ: dict[str, str],
        withheld: Collection[str],
        dropped: Callable[[int], None],
        timeout_s: float,
    ) -> None:
        self._command = command
        self._environ = environ
        self._withheld = withheld
        self._dropped = dropped
        self._timeout_s = timeout_s
        self._queue: deque[_Trace] = deque()
        self._queued_spans = 0
        # Written to the child, not yet said sent or dropped by it.
        self._in_flight = 0
        self._closing = anyio.Event()
        self._closed = anyio.Event()
        self._scope = anyio.CancelScope()
        self._running = False

    def put(self, trace: _Trace) -> None:
        if self._queued_spans + len(trace) > _QUEUE_SPANS:
            self._dropped(len(trace))
            return
        self._queued_spans += len(trace)
        self._queue.append(trace)

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        with self._scope:
            task_status.started()
            await self._child()
            await run_again(_NAME, log, lambda: self._child(again=True))

    async def aclose(self) -> None:
        self._closing.set()
        if self._running:
            # The child gets the queue, and the export timeout to send it.
            with anyio.move_on_after(self._timeout_s + _EXIT_S + 1):
                await self._closed.wait()
        self._scope.cancel()
        left = self._queued_spans + self._in_flight
        if left:
            log.warning("%d spans still queued at stop are dropped", left)
            self._dropped(left)
            self._queued_spans = self._in_flight = 0

    async def _child(self, *, again: bool = False) -> None:
        """One child, until it ends, or until it sent what it was given at a stop."""
        child = await spawn(self._command, self._environ, stdout=True, withheld=self._withheld)
        self._running = True
        if again:
            log.warning("the %s started again", _NAME)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._forward, child)
                tg.start_soon(self._read, child, tg.cancel_scope)
                await self._feed(child)
                # Stopping: the child sends what it holds, then ends, and
                # so does its output (``_read`` then ends the group), within
                # the export timeout.
                assert child.stdin is not None
                await child.stdin.aclose()
                with anyio.move_on_after(self._timeout_s):
                    await anyio.sleep_forever()
                tg.cancel_scope.cancel()
        finally:
            self._running = False
            # A child whose output ended is ending: waited for, not killed
            # (a kill would reap it under the event loop's watcher).
            with anyio.CancelScope(shield=True):
                await stop(child, _NAME, log, _EXIT_S)
        if self._closing.is_set():
            # Stopped, not ended: no restart.
            self._closed.set()
            self._scope.cancel()
            await anyio.lowlevel.checkpoint()
        log_exit(_NAME, log, await child.wait())
        if self._in_flight:
            log.warning("the %s took %d spans with it; dropped", _NAME, self._in_flight)
            self._dropped(self._in_flight)
            self._in_flight = 0

    async def _feed(self, child: Process) -> None:
        """Write the queue out twice a second until a stop, then once more."""
        assert child.stdin is not None
        while not self._closing.is_set():
            with anyio.move_on_after(_BATCH_DELAY_S):
                await self._closing.wait()
            if self._queue:
                traces = list(self._queue)
                self._queue.clear()
                count, self._queued_spans = self._queued_spans, 0
                self._in_flight += count
                await child.stdin.send(_encode([_records(t) for t in traces]) + b"\n")

    async def _read(self, child: Process, scope: anyio.CancelScope) -> None:
        """The child's account of each batch: ``sent N`` or ``dropped N``.
        Its end is the child's: the feeding stops with it."""
        assert child.stdout is not None
        async for line in lines(child.stdout):
            said, _, number = line.partition(" ")
            # No more than it was given: a garbled line cannot make a count
            # negative (a counter refuses to go down).
            count = min(int(number), self._in_flight) if number.isdigit() else 0
            self._in_flight -= count
            if said == "dropped":
                # Counted first: by the time the log says so, the metric does too.
                self._dropped(count)
                log.warning("the collector did not take %d spans; dropped", count)
        scope.cancel()

    @staticmethod
    async def _forward(child: Process) -> None:
        """The child's log lines, as the daemon's."""
        assert child.stderr is not None
        async for line in lines(child.stderr):
            log.warning("%s", line)


def _records(trace: _Trace) -> list[SpanRecord]:
    return [
        SpanRecord(
            span.name,
            span.kind.value,
            span.start,
            span.end or span.start,
            span.error,
            span.attributes,
        )
        for span in (trace.root, *trace.children)
    ]
