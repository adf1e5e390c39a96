"""Prometheus metrics, served at ``/metrics`` by prometheus-client.

Every name has the ``rosterd_`` prefix and follows the conventions:
``_total`` on counters, base units (``_seconds``). Counters start at 0 in
each process; ``rate()`` handles restarts. The server is prometheus-client's
own WSGI app, on a thread of its own: a scrape never waits on the event
loop. The server is built here rather than by ``start_http_server`` for
its listen backlog, its bound on scrapes at once (see ``_ScrapeServer``)
and its deadline on each request (see ``_Scrape``).
"""

from __future__ import annotations

import io
import logging
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.process_collector import ProcessCollector

from .._errors import ConfigError
from ..org import MetricsConfig, listen_address

log = logging.getLogger("rosterd.observe")

# From a fast echo turn to a slow tool loop of a large model.
_TURN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60)
# A scrape's whole request within this, or its connection is closed; its
# answer sent within it again. A scraper asks at once: only a client that
# sends nothing, or a request a byte at a time, ever takes so long.
REQUEST_TIMEOUT_S = 5.0
# Scrapes served at once, a thread each; the next wait in the listen backlog
# until one ends, which the deadline above makes soon.
MAX_SCRAPES = 64


class Metrics:
    """The daemon's metrics in a registry of their own, and the server that publishes them."""

    def __init__(self, config: MetricsConfig, where: str) -> None:
        self.config = config
        # The org.toml the address comes from, for the error if it is taken.
        self._where = where
        self.registry = CollectorRegistry()
        ProcessCollector(namespace="", registry=self.registry)
        self._define_turn_metrics()
        self._define_daemon_metrics()
        self._server: WSGIServer | None = None
        self._series: dict[tuple[str, str, str], TurnSeries] = {}

    # Each metric in this daemon's own registry, never in prometheus-client's
    # global one (where a second Metrics in one process would clash).
    def _counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, documentation, labels, registry=self.registry)

    def _gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, documentation, labels, registry=self.registry)

    def _histogram(
        self, name: str, documentation: str, labels: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> Histogram:
        return Histogram(name, documentation, labels, buckets=buckets, registry=self.registry)

    def _define_turn_metrics(self) -> None:
        """What turns and their engine calls count."""
        self.turns = self._counter(
            "rosterd_turns",
            "Turns and runs answered, by surface, worker, engine kind and outcome.",
            ("surface", "worker", "engine", "outcome"),
        )
        self.turn_seconds = self._histogram(
            "rosterd_turn_duration_seconds",
            "Time from compiling a turn to its last engine call's answer, tool steps included.",
            ("surface", "worker"),
            buckets=_TURN_BUCKETS,
        )
        self.first_token = self._histogram(
            "rosterd_engine_first_token_seconds",
            "Time from sending a request to the first piece of its reply.",
            ("engine",),
            buckets=_TURN_BUCKETS,
        )
        self.tokens = self._counter(
            "rosterd_tokens",
            "Tokens as the provider reported them: fresh input, cached input, "
            "input written to the cache, output.",
            ("worker", "engine", "kind"),
        )
        self.cost = self._counter(
            "rosterd_cost_usd",
            "What engine calls cost, in USD, at their model's price; calls without a price "
            "are not counted here.",
            ("worker", "engine", "model"),
        )
        self.cache_misses = self._counter(
            "rosterd_cache_misses",
            "Engine calls whose cache verdict was not a hit, by verdict.",
            ("cause",),
        )
        self.rollovers = self._counter(
            "rosterd_rollovers",
            "Sessions that rolled over to a new one, by reason.",
            ("reason",),
        )

    def _define_daemon_metrics(self) -> None:
        """What the daemon around the turns counts: sessions, clients,
        tasks, failures, waits."""
        self.sessions_warm = self._gauge("rosterd_sessions_warm", "Sessions warm in this daemon.")
        self.connections = self._gauge("rosterd_connections", "Clients connected to the socket.")
        self.tasks = self._gauge("rosterd_tasks", "Tasks in the state, by status.", ("status",))
        self.engine_errors = self._counter(
            "rosterd_engine_errors",
            "Engine calls that failed after their retries, by engine kind and code.",
            ("engine", "code"),
        )
        self.gateway_calls = self._counter(
            "rosterd_gateway_calls",
            "Tool calls forwarded to the gateway, by outcome.",
            ("outcome",),
        )
        self.queue_wait = self._histogram(
            "rosterd_queue_wait_seconds",
            "Time a turn waited for its session: earlier turns, another host's lease.",
            buckets=_WAIT_BUCKETS,
        )
        self.telemetry_dropped = self._counter(
            "rosterd_telemetry_dropped",
            "Spans dropped because the collector was down, slow or behind.",
        )

    def series(self, surface: str, worker: str, engine: str) -> TurnSeries:
        """The series a turn of *surface*, *worker* and *engine* counts in,
        looked up once per combination rather than label by label each turn."""
        key = (surface, worker, engine)
        found = self._series.get(key)
        if found is None:
            found = self._series[key] = TurnSeries(self, surface, worker, engine)
        return found

    def __repr__(self) -> str:
        return f"Metrics({self.config.listen!r})"

    def start(self) -> None:
        """Serve ``/metrics`` on the configured address; ``ConfigError`` if it is taken."""
        assert self.config.listen is not None
        host, port = listen_address(self.config.listen)
        try:
            self._server = _serve(host, port, self.registry)
        except OSError as exc:
            raise ConfigError(
                f"{self._where}: [metrics] listen = {self.config.listen!r}: cannot listen: "
                f"{exc.strerror}",
                path=self._where,
                key="metrics.listen",
            ) from None
        log.info("metrics on http://%s:%d/metrics", host, self._server.server_port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _ScrapeServer(ThreadingWSGIServer):
    """A thread per scrape, ``MAX_SCRAPES`` at most, behind a listen backlog
    as deep as the system allows: socketserver's is 5, and the handshakes
    of a burst of scrapes it has no room for are dropped, each scraper
    waiting out the kernel's retries (a minute or more) for an answer that
    was a few ms away."""

    request_queue_size = socket.SOMAXCONN

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(MAX_SCRAPES)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Blocks accepting until a scrape ends: the rest wait in the backlog.
        self._slots.acquire()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that ran out of time, or went away, is no error of ours."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Scrape(WSGIRequestHandler):
    """One scrape, closed unless its request is whole within
    ``REQUEST_TIMEOUT_S``: wsgiref would wait for ever on a client that
    sends nothing, and a timeout per read alone on one that sends a byte
    at a time."""

    timeout = REQUEST_TIMEOUT_S

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        self.rfile = io.BufferedReader(_ReadBy(self.connection, deadline))

    def log_message(self, format: str, *args: object) -> None:
        """No log line per scrape."""


class _ReadBy(io.RawIOBase):
    """A socket's bytes until *deadline* (``time.monotonic``), then ``TimeoutError``."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        self._connection = connection
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no whole request in time")
        self._connection.settimeout(left)
        try:
            return self._connection.recv_into(buffer)
        finally:
            self._connection.settimeout(REQUEST_TIMEOUT_S)


def _serve(host: str, port: int, registry: CollectorRegistry) -> WSGIServer:
    """``/metrics`` of *registry* served on *host*:*port* by a thread of its own."""
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(_ScrapeServer):
        address_family = family

    server = make_server(
        str(address[0]), port, make_wsgi_app(registry), Server, handler_class=_Scrape
    )
    threading.Thread(target=server.serve_forever, name="rosterd-metrics", daemon=True).start()
    return server


class TurnSeries:
    """The labelled series of one surface, worker and engine kind."""

    def __init__(self, metrics: Metrics, surface: str, worker: str, engine: str) -> None:
        self._turns = metrics.turns
        self._labels = (surface, worker, engine)
        self._outcomes: dict[str, Counter] = {}
        self.duration = metrics.turn_seconds.labels(surface, worker)
        self.first_token = metrics.first_token.labels(engine)
        tokens = metrics.tokens
        self.input = tokens.labels(worker, engine, "input")
        self.cached = tokens.labels(worker, engine, "cached")
        self.cache_write = tokens.labels(worker, engine, "cache_write")
        self.output = tokens.labels(worker, engine, "output")

    def __repr__(self) -> str:
        return f"TurnSeries{self._labels!r}"

    def ended(self, outcome: str) -> Counter:
        """The turn counter of *outcome*."""
        found = self._outcomes.get(outcome)
        if found is None:
            found = self._outcomes[outcome] = self._turns.labels(*self._labels, outcome)
        return found
