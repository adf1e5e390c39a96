"""An OTLP/HTTP trace collector in the test's own loop.

It takes ``POST /v1/traces`` with a protobuf ``ExportTraceServiceRequest``
(what opentelemetry-exporter-otlp-proto-http sends), decodes it with
opentelemetry-proto, keeps every span and answers 200, over keep-alive
connections as the exporter uses them.
"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

__all__ = ("Collector", "collector")


class Collector:
    """The spans received so far, and the paths they were posted to."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.spans: list[Span] = []
        self.paths: list[str] = []
        self.resources: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"Collector({self.url}, {len(self.spans)} spans)"

    def named(self, name: str) -> list[Span]:
        return [span for span in self.spans if span.name == name]

    async def handle(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            while True:
                try:
                    head = await reader.receive_until(b"\r\n\r\n", 65536)
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    return
                request_line, *lines = head.decode("latin-1").split("\r\n")
                headers = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (line.partition(":") for line in lines)
                }
                body = await reader.receive_exactly(int(headers.get("content-length", "0")))
                if headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                self.paths.append(request_line.split()[1])
                self._take(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                await stream.send(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                    + f"Content-Length: {len(answer)}\r\n\r\n".encode()
                    + answer
                )

    def _take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            self.resources.append(attributes(resource_spans.resource.attributes))
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(scope_spans.spans)


def attributes(pairs: Any) -> dict[str, Any]:
    """OTLP key-values as a plain dict."""
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


@asynccontextmanager
async def collector() -> AsyncIterator[Collector]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    received = Collector(port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, received.handle)
        yield received
        tg.cancel_scope.cancel()
