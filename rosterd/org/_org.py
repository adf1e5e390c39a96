"""A validated org snapshot and the host-owned scope of a run.

An ``Org`` is immutable: a reload builds a new one, so a running session can
keep the snapshot its system part was compiled from.
"""

from __future__ import annotations

import enum
import hashlib

import msgspec

from .._errors import ConflictError, NotFoundError
from .._ids import check_id
from ._config import (
    ChannelConfig,
    ConnectionConfig,
    ContextBudget,
    DaemonConfig,
    EngineConfig,
    GatewayConfig,
    InspectConfig,
    MetricsConfig,
    PriceConfig,
    TelemetryConfig,
    WorkerConfig,
)


class Surface(enum.Enum):
    """Where a run comes from; it selects the scope framing of the prompt."""

    TASK = "task"
    SESSION = "session"
    DIRECT = "direct"


class RunScope(msgspec.Struct, frozen=True):
    """Worker, channel and surface of a run, taken only from the RPC call."""

    surface: Surface
    worker: str
    channel: str | None


# What traces, errors and ``daemon.status`` call the unnamed ``[engine]``.
DEFAULT_ENGINE = "engine"


class NamedEngine(msgspec.Struct, frozen=True):
    """An engine with the name it has in org.toml (``engine`` for ``[engine]``)."""

    name: str
    config: EngineConfig


class Org(msgspec.Struct, frozen=True):
    """Everything the compiler may read of an org directory, already loaded.

    Every table of org.toml is a field, and every one may be left out: then
    it takes its defaults (the loader reads the tables off these fields).
    """

    context: ContextBudget = ContextBudget()
    daemon: DaemonConfig = DaemonConfig()
    engine: EngineConfig = EngineConfig()
    workers: dict[str, WorkerConfig] = {}
    channels: dict[str, ChannelConfig] = {}
    connections: dict[str, ConnectionConfig] = {}
    identities: dict[str, str] = {}
    purposes: dict[str, str] = {}
    gateway: GatewayConfig = GatewayConfig()
    engines: dict[str, EngineConfig] = {}
    # Per model name, as the engines' ``model`` says it.
    prices: dict[str, PriceConfig] = {}
    metrics: MetricsConfig = MetricsConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    inspect: InspectConfig = InspectConfig()

    def budget_for(self, worker: str) -> ContextBudget:
        overlay = self._worker(worker).context
        changes = {
            f: v for f in overlay.__struct_fields__ if (v := getattr(overlay, f)) is not None
        }
        return msgspec.structs.replace(self.context, **changes)

    def engine_for(self, worker: str) -> EngineConfig:
        """The engine *worker* uses: ``[engine]``, or the named one its
        overlay ``use``s, with the overlay's other keys over it."""
        overlay = self._worker(worker).engine
        return overlay.over(self.engine if overlay.use is None else self.engines[overlay.use])

    def named_engines(self) -> dict[str, EngineConfig]:
        """Every engine of the org by its name: ``[engine]`` as ``engine``,
        then each ``[engines.<name>]``."""
        return {DEFAULT_ENGINE: self.engine, **self.engines}

    def secret_env_names(self) -> frozenset[str]:
        """The environment variables the org names as holding secrets: each
        engine's ``api_key_env`` (named, default, a worker's own) and each
        connection's ``env``."""
        names = [engine.api_key_env for engine in self.named_engines().values()]
        names += [worker.engine.api_key_env for worker in self.workers.values()]
        names += [connection.env for connection in self.connections.values()]
        return frozenset(name for name in names if name is not None)

    def engine_chain(self, worker: str) -> tuple[NamedEngine, ...]:
        """*worker*'s engine, then each of its fallbacks, in the order to try them.

        A fallback's own ``fallback`` list is not followed: one chain per worker.
        """
        engine = self.engine_for(worker)
        name = self._worker(worker).engine.use or DEFAULT_ENGINE
        fallbacks = (NamedEngine(f, self.engines[f]) for f in engine.fallback)
        return (NamedEngine(name, engine), *fallbacks)

    def engine_fingerprint(self, worker: str) -> str:
        """Hash of the engine settings that decide whether a cached prefix applies."""
        engine = self.engine_for(worker)
        canonical = msgspec.json.encode([engine.kind, engine.base_url, engine.model])
        return hashlib.sha256(canonical).hexdigest()

    def scope(self, surface: Surface, worker: str, channel: str | None) -> RunScope:
        """Validate a run's scope against org.toml; the only way to make one.

        A task or session needs a channel that lists the worker; a direct run
        has no channel. Text inside a message can never reach this.
        """
        check_id("worker", worker)
        self._worker(worker)
        if surface is Surface.DIRECT:
            if channel is not None:
                raise ConflictError("a direct run has no channel")
            return RunScope(surface=surface, worker=worker, channel=None)
        if channel is None:
            raise ConflictError(f"a {surface.value} run needs a channel")
        check_id("channel", channel)
        config = self.channels.get(channel)
        if config is None:
            raise NotFoundError("channel", channel)
        if worker not in config.workers:
            raise NotFoundError(
                "worker",
                worker,
                f"not a member of channel {channel!r} (channels.{channel}.workers)",
            )
        return RunScope(surface=surface, worker=worker, channel=channel)

    def scopes(self) -> list[RunScope]:
        """Every scope the org allows: each worker in each of its channels, as a
        session and as a task, then its direct runs."""
        scopes: list[RunScope] = []
        for worker in sorted(self.workers):
            for channel in sorted(self.channels):
                if worker in self.channels[channel].workers:
                    scopes += [
                        RunScope(surface=surface, worker=worker, channel=channel)
                        for surface in (Surface.SESSION, Surface.TASK)
                    ]
            scopes.append(RunScope(surface=Surface.DIRECT, worker=worker, channel=None))
        return scopes

    def _worker(self, worker: str) -> WorkerConfig:
        config = self.workers.get(worker)
        if config is None:
            raise NotFoundError("worker", worker)
        return config
