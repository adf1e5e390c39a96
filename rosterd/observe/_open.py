"""Starting and stopping the daemon's telemetry, and the extras it needs."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from .._child import missing_module
from .._errors import ConfigError, as_itself
from ..org import MetricsConfig, Org
from ._telemetry import Telemetry

if TYPE_CHECKING:
    from ._metrics import Metrics
    from ._tracing import Tracing

log = logging.getLogger("rosterd.observe")

# What the exporting child imports (``python -m rosterd.observe``).
_EXPORTER_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
# The environment variables that turn tracing on without [telemetry] otlp_endpoint.
_OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracing_wanted(org: Org, environ: Mapping[str, str]) -> bool:
    """Whether *org* or the OTLP environment variables ask for traces."""
    return org.telemetry.otlp_endpoint is not None or any(
        environ.get(name) for name in _OTLP_ENDPOINTS
    )


@asynccontextmanager
async def open_telemetry(
    org: Org, toml: Path, environ: Mapping[str, str], metrics_listen: str | None = None
) -> AsyncIterator[Telemetry]:
    """The telemetry *org* asks for, running until the block ends.

    *metrics_listen* (``roster serve --metrics``) overrides ``[metrics]
    listen``. A config that asks for an extra that is not installed fails
    here, naming the extra; so does a metrics address already in use.
    """
    config = org.metrics
    if metrics_listen is not None:
        try:
            config = MetricsConfig(listen=metrics_listen, allow_remote=config.allow_remote)
        except ValueError as exc:
            raise ConfigError(f"--metrics: {exc}", path=str(toml), key="metrics.listen") from None
    metrics = _metrics(config, toml) if config.listen is not None else None
    tracing = None
    if tracing_wanted(org, environ):
        dropped = metrics.telemetry_dropped.inc if metrics is not None else _log_dropped
        tracing = _tracing(org, toml, environ, dropped)
    # A failure of the block it wraps (the daemon's start, say) raises as itself.
    with as_itself():
        async with anyio.create_task_group() as tg:
            try:
                if metrics is not None:
                    metrics.start()
                if tracing is not None:
                    await tg.start(tracing.run)
                yield Telemetry(metrics, tracing)
            finally:
                if metrics is not None:
                    metrics.stop()
                if tracing is not None:
                    with anyio.CancelScope(shield=True):
                        await tracing.aclose()


def _metrics(config: MetricsConfig, toml: Path) -> Metrics:
    try:
        from ._metrics import Metrics
    except ImportError as exc:
        raise _missing("metrics", "metrics", exc, toml) from None
    return Metrics(config, str(toml))


def _tracing(
    org: Org, toml: Path, environ: Mapping[str, str], dropped: Callable[[int], None]
) -> Tracing:
    try:
        from ._tracing import Tracing
    except ImportError as exc:
        raise _missing("telemetry", "telemetry", exc, toml) from None
    missing = missing_module(_EXPORTER_MODULES)
    if missing is not None:
        raise _missing("telemetry", "telemetry", ImportError(name=missing), toml)
    return Tracing(org.telemetry, environ, dropped, org.secret_env_names())


def _missing(table: str, extra: str, exc: ImportError, toml: Path) -> ConfigError:
    return ConfigError(
        f"{toml}: [{table}] needs the {extra} extra, which is not installed "
        f"(no module {exc.name!r}): pip install 'rosterd[{extra}]'",
        path=str(toml),
        key=table,
    )


def _log_dropped(count: int) -> None:
    log.warning("%d spans dropped", count)
