"""OpenTelemetry traces over OTLP/HTTP, on the GenAI semantic conventions.

Each turn or run is one span, ``invoke_agent {worker}``; its children are
``compile`` and ``commit`` (the trace and transcript writes), ``chat
{model}`` per engine call with the ``gen_ai.*`` request and usage
attributes, and ``execute_tool {name}`` per tool call. Spans are parented
explicitly, never through the ambient context, since a turn's work hops
between tasks and threads.

Export never holds up a turn: a span that ends goes into a bounded queue,
and one thread sends batches to the collector. A span that finds the queue
full, or whose batch the collector does not take (down, slow, refusing),
is dropped and counted (``rosterd_telemetry_dropped_total``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import msgspec
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ..compiler import ToolStatus
from ..engines import ChatMessage, EngineReply
from ..org import EngineConfig, TelemetryConfig
from ..protocol import RunInfo

__all__ = ("Span", "Tracing")

log = logging.getLogger("rosterd.observe")

_QUEUE_SPANS = 4096
_BATCH_SPANS = 512
_BATCH_DELAY_S = 0.5
_encode = msgspec.json.Encoder().encode


class Tracing:
    """The tracer of one daemon, and the export behind it."""

    def __init__(self, config: TelemetryConfig, dropped: Callable[[int], None]) -> None:
        self.config = config
        endpoint = config.otlp_endpoint
        # Without an endpoint the exporter reads OTEL_EXPORTER_OTLP_* itself.
        exporter = OTLPSpanExporter(
            endpoint=f"{endpoint.rstrip('/')}/v1/traces" if endpoint else None,
            timeout=config.timeout_s,
        )
        self._batches = _Batches(exporter, dropped, config.timeout_s)
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": config.service_name})
        )
        self._provider.add_span_processor(self._batches)
        self._tracer = self._provider.get_tracer("rosterd")

    def __repr__(self) -> str:
        return f"Tracing({self.config.otlp_endpoint!r})"

    def turn_span(self, info: RunInfo) -> Span:
        attributes: dict[str, str | int] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": info.worker,
            "gen_ai.conversation.id": info.id,
            "rosterd.surface": info.surface,
        }
        if info.channel is not None:
            attributes["rosterd.channel"] = info.channel
        return self._tracer.start_span(f"invoke_agent {info.worker}", attributes=attributes)

    @contextmanager
    def phase(self, parent: Span, name: str) -> Iterator[None]:
        span = self._tracer.start_span(name, context=trace.set_span_in_context(parent))
        try:
            yield
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            span.end()

    def chat_span(self, parent: Span, info: RunInfo, engine: EngineConfig, step: int) -> Span:
        model = _model(engine)
        return self._tracer.start_span(
            f"chat {model}",
            context=trace.set_span_in_context(parent),
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": engine.kind,
                "gen_ai.request.model": model,
                "gen_ai.request.max_tokens": engine.max_tokens,
                "gen_ai.conversation.id": info.id,
                "rosterd.step": step,
            },
        )

    def answered(
        self, span: Span, engine: EngineConfig, reply: EngineReply, added: Sequence[ChatMessage]
    ) -> None:
        """End a ``chat`` span with what the provider reported (and, if
        asked, the new input and the reply)."""
        # The configured model: the engines do not read the provider's own name of it.
        span.set_attribute("gen_ai.response.model", _model(engine))
        usage = reply.usage
        if usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens)
            span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)
        if reply.calls:
            span.set_attribute("gen_ai.response.finish_reasons", ("tool_calls",))
        if self.config.capture_content:
            span.set_attribute("gen_ai.input.messages", _messages(added))
            output = [ChatMessage(role="assistant", content=reply.text)]
            span.set_attribute("gen_ai.output.messages", _messages(output))
        span.end()

    def tool_span(self, parent: Span, name: str, call_id: str, status: ToolStatus) -> None:
        span = self._tracer.start_span(
            f"execute_tool {name}",
            context=trace.set_span_in_context(parent),
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "rosterd.tool.status": status,
            },
        )
        if status != "ok":
            span.set_status(Status(StatusCode.ERROR, status))
        span.end()

    def end(self, span: Span, error: str | None) -> None:
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def shutdown(self) -> None:
        """Send what is queued (bounded by the export timeout), then stop."""
        self._provider.shutdown()


def _model(engine: EngineConfig) -> str:
    """The model a span names: the configured one, or the engine kind (echo)."""
    return engine.model or engine.kind


def _messages(messages: Sequence[ChatMessage]) -> str:
    """*messages* in the conventions' shape: role and text parts, as JSON."""
    return _encode(
        [{"role": m.role, "parts": [{"type": "text", "content": m.content}]} for m in messages]
    ).decode()


class _Batches(SpanProcessor):
    """A bounded queue of ended spans, exported in batches by one thread."""

    def __init__(
        self, exporter: SpanExporter, dropped: Callable[[int], None], timeout_s: float
    ) -> None:
        self._exporter = exporter
        self._dropped = dropped
        self._timeout_s = timeout_s
        self._queue: queue.Queue[ReadableSpan | None] = queue.Queue(_QUEUE_SPANS)
        self._thread = threading.Thread(target=self._run, name="rosterd-otlp", daemon=True)
        self._thread.start()

    def on_end(self, span: ReadableSpan) -> None:
        try:
            self._queue.put_nowait(span)
        except queue.Full:
            self._dropped(1)

    def _run(self) -> None:
        done = False
        while not done:
            try:
                item = self._queue.get(timeout=_BATCH_DELAY_S)
            except queue.Empty:
                continue
            batch: list[ReadableSpan] = []
            while True:
                if item is None:
                    done = True
                    break
                batch.append(item)
                if len(batch) == _BATCH_SPANS:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._export(batch)

    def _export(self, batch: Sequence[ReadableSpan]) -> None:
        if not batch:
            return
        try:
            result = self._exporter.export(batch)
        except Exception:  # the exporter's own failure must not end the thread
            log.exception("exporting %d spans failed", len(batch))
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            log.warning("the collector did not take %d spans; dropped", len(batch))
            self._dropped(len(batch))

    def shutdown(self) -> None:
        # Whatever the collector has not taken within the export timeout is
        # left behind: a stopping daemon waits for it no longer than that.
        try:
            self._queue.put(None, timeout=self._timeout_s)
        except queue.Full:
            log.warning("the collector is behind: spans still queued at stop are dropped")
        self._thread.join(self._timeout_s)
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
