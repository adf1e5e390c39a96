"""OpenTelemetry traces over OTLP/HTTP, on the GenAI semantic conventions.

Each turn or run is one trace: a span ``invoke_agent {worker}`` whose
children are ``compile`` and ``commit`` (the writes that precede a send),
``chat {model}`` per engine call with the ``gen_ai.*`` request and usage
attributes, and ``execute_tool {name}`` per tool call.

A turn only notes names, times and attributes in plain records; one
thread builds the SDK's spans from them (ids, contexts, resource) and
exports them in batches with the OTLP exporter. So a turn pays for an
append per span, not for span objects, locks and hand-overs between
threads: with an echo engine a turn takes about 2 ms, and tracing must
not show in it. A finished turn goes into a bounded queue; one that finds
it full, or whose batch the collector does not take within ``timeout_s``
(down, slow, refusing), is dropped and its spans counted
(``rosterd_telemetry_dropped_total``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import msgspec
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from .. import __version__
from ..compiler import ToolStatus
from ..engines import EngineReply
from ..org import EngineConfig, TelemetryConfig
from ..protocol import ChatMessage, RunInfo

log = logging.getLogger("rosterd.observe")

_QUEUE_SPANS = 8192
# Small batches: encoding one holds the interpreter, which a turn then waits for.
_BATCH_SPANS = 128
_BATCH_DELAY_S = 0.5
_SCOPE = InstrumentationScope("rosterd", __version__)
_encode = msgspec.json.Encoder().encode

Attributes = dict[str, str | int | bool | tuple[str, ...]]


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
        self, config: TelemetryConfig, environ: Mapping[str, str], dropped: Callable[[int], None]
    ) -> None:
        self.config = config
        endpoint = config.otlp_endpoint
        # Without an endpoint the exporter reads OTEL_EXPORTER_OTLP_* itself.
        exporter = OTLPSpanExporter(
            endpoint=f"{endpoint.rstrip('/')}/v1/traces" if endpoint else None,
            timeout=config.timeout_s,
        )
        name = config.service_name or environ.get("OTEL_SERVICE_NAME") or "rosterd"
        resource = Resource.create({"service.name": name})
        self._export = _Export(exporter, resource, dropped, config.timeout_s)

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

    def shutdown(self) -> None:
        """Send what is queued (bounded by the export timeout), then stop."""
        self._export.shutdown()


def _model(engine: EngineConfig) -> str:
    """The model a span names: the configured one, or the engine kind (echo)."""
    return engine.model or engine.kind


def _messages(messages: Sequence[ChatMessage]) -> str:
    """*messages* in the conventions' shape: role and text parts, as JSON."""
    return _encode(
        [{"role": m.role, "parts": [{"type": "text", "content": m.content}]} for m in messages]
    ).decode()


class _Export:
    """Finished turns, queued and bounded, made into spans and exported by one thread.

    The thread wakes on a timer, never per turn: ending a turn costs one
    append, not a hand-over of the interpreter to another thread.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        resource: Resource,
        dropped: Callable[[int], None],
        timeout_s: float,
    ) -> None:
        self._exporter = exporter
        self._resource = resource
        self._dropped = dropped
        self._timeout_s = timeout_s
        self._queue: deque[_Trace] = deque()
        self._queued_spans = 0
        # Taken by the turn that queues and the thread that sends: the
        # count and the queue move together.
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        # Set at shutdown: past it, what is still queued is left behind.
        self._deadline = float("inf")
        self._random = random.Random()
        self._thread = threading.Thread(target=self._run, name="rosterd-otlp", daemon=True)
        self._thread.start()

    def put(self, trace: _Trace) -> None:
        with self._lock:
            full = self._queued_spans + len(trace) > _QUEUE_SPANS
            if not full:
                self._queued_spans += len(trace)
                self._queue.append(trace)
        if full:
            self._dropped(len(trace))

    def _run(self) -> None:
        while not self._stopping.wait(_BATCH_DELAY_S):
            self._send_queued()
        self._send_queued()

    def _send_queued(self) -> None:
        while self._queue and time.monotonic() < self._deadline:
            batch: list[ReadableSpan] = []
            while self._queue and len(batch) < _BATCH_SPANS:
                with self._lock:
                    trace = self._queue.popleft()
                    self._queued_spans -= len(trace)
                batch += self._spans(trace)
            self._send(batch)
            # Let a waiting turn have the interpreter before the next batch.
            time.sleep(0)

    def _spans(self, trace: _Trace) -> list[ReadableSpan]:
        flags = TraceFlags(TraceFlags.SAMPLED)
        trace_id = self._random.getrandbits(128)
        root = SpanContext(trace_id, self._random.getrandbits(64), False, flags)
        spans = [self._span(trace.root, root, None)]
        for child in trace.children:
            context = SpanContext(trace_id, self._random.getrandbits(64), False, flags)
            spans.append(self._span(child, context, root))
        return spans

    def _span(self, span: Span, context: SpanContext, parent: SpanContext | None) -> ReadableSpan:
        status = Status(StatusCode.UNSET if span.error is None else StatusCode.ERROR, span.error)
        attributes: Mapping[str, str | int | bool | tuple[str, ...]] = span.attributes
        return ReadableSpan(
            span.name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=attributes,
            kind=span.kind,
            status=status,
            start_time=span.start,
            end_time=span.end or span.start,
            instrumentation_scope=_SCOPE,
        )

    def _send(self, batch: Sequence[ReadableSpan]) -> None:
        try:
            result = self._exporter.export(batch)
        except Exception:  # the exporter's own failure must not end the thread
            log.exception("exporting %d spans failed", len(batch))
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            # Counted first: by the time the log says so, the metric does too.
            self._dropped(len(batch))
            log.warning("the collector did not take %d spans; dropped", len(batch))

    def shutdown(self) -> None:
        # What the collector has not taken within the export timeout is left
        # behind: a stopping daemon waits for it no longer than that.
        self._deadline = time.monotonic() + self._timeout_s
        self._stopping.set()
        self._thread.join(self._timeout_s)
        if self._queued_spans:
            log.warning("%d spans still queued at stop are dropped", self._queued_spans)
            self._dropped(self._queued_spans)
        self._exporter.shutdown()
