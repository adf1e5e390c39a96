"""The span exporter the daemon starts as a child: ``python -m rosterd.observe``.

It reads finished turns from its standard input, one JSON line of
``SpanRecord`` lists per batch, makes the SDK's spans of them (ids,
contexts, resource) and exports them with the OTLP/HTTP exporter, which
reads ``OTEL_EXPORTER_OTLP_*`` where the org names no endpoint. For each
batch it says ``sent N`` or ``dropped N`` on its standard output; the
daemon counts and logs the drops. It ends when its standard input does.

Its settings come in its environment: ``ROSTER_OTLP_ENDPOINT`` (empty: the
exporter's own), ``ROSTER_OTLP_TIMEOUT_S`` and ``ROSTER_OTLP_SERVICE``.
"""

from __future__ import annotations

import logging
import os
import random
import sys
from collections.abc import Sequence

import msgspec
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from .. import __version__
from ._spans import SpanRecord

log = logging.getLogger("rosterd.observe")

# Spans per request to the collector.
_BATCH_SPANS = 128
_SCOPE = InstrumentationScope("rosterd", __version__)
_FLAGS = TraceFlags(TraceFlags.SAMPLED)


def main() -> int:
    logging.basicConfig(stream=sys.stderr, format="%(message)s", level=logging.WARNING)
    endpoint = os.environ.get("ROSTER_OTLP_ENDPOINT") or None
    timeout_s = float(os.environ["ROSTER_OTLP_TIMEOUT_S"])
    exporter: SpanExporter = OTLPSpanExporter(
        endpoint=f"{endpoint.rstrip('/')}/v1/traces" if endpoint else None, timeout=timeout_s
    )
    resource = Resource.create({"service.name": os.environ["ROSTER_OTLP_SERVICE"]})
    decode = msgspec.json.Decoder(list[list[SpanRecord]]).decode
    ids = random.Random()
    try:
        for line in sys.stdin.buffer:
            spans = [span for trace in decode(line) for span in _spans(trace, resource, ids)]
            for start in range(0, len(spans), _BATCH_SPANS):
                _send(exporter, spans[start : start + _BATCH_SPANS])
    finally:
        exporter.shutdown()
    return 0


def _spans(
    trace: Sequence[SpanRecord], resource: Resource, ids: random.Random
) -> list[ReadableSpan]:
    """The SDK's spans of one trace: its first record the root."""
    trace_id = ids.getrandbits(128)
    root = SpanContext(trace_id, ids.getrandbits(64), False, _FLAGS)
    spans = [_span(trace[0], root, None, resource)]
    for child in trace[1:]:
        context = SpanContext(trace_id, ids.getrandbits(64), False, _FLAGS)
        spans.append(_span(child, context, root, resource))
    return spans


def _span(
    span: SpanRecord, context: SpanContext, parent: SpanContext | None, resource: Resource
) -> ReadableSpan:
    status = Status(StatusCode.UNSET if span.error is None else StatusCode.ERROR, span.error)
    return ReadableSpan(
        span.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=span.attributes,
        kind=SpanKind(span.kind),
        status=status,
        start_time=span.start,
        end_time=span.end,
        instrumentation_scope=_SCOPE,
    )


def _send(exporter: SpanExporter, batch: list[ReadableSpan]) -> None:
    try:
        result = exporter.export(batch)
    except Exception:  # the exporter's own failure must not end the exporter
        log.exception("exporting %d spans failed", len(batch))
        result = SpanExportResult.FAILURE
    said = "sent" if result is SpanExportResult.SUCCESS else "dropped"
    sys.stdout.write(f"{said} {len(batch)}\n")
    sys.stdout.flush()
