"""Org configuration: org.toml and the trusted files it refers to."""

from ._config import (
    BUILTIN_TOOLS,
    FILE_GATE,
    FORGET,
    REMEMBER,
    ChannelConfig,
    ConnectionConfig,
    ContextBudget,
    ContextOverlay,
    DaemonConfig,
    EngineConfig,
    EngineKind,
    EngineOverlay,
    GatewayConfig,
    MemoryScope,
    MetricsConfig,
    TelemetryConfig,
    WorkerConfig,
    listen_address,
)
from ._load import identity_path, load_org, purpose_path
from ._org import NamedEngine, Org, RunScope, Surface
from ._source import OrgSource

__all__ = (
    "BUILTIN_TOOLS",
    "FILE_GATE",
    "FORGET",
    "REMEMBER",
    "ChannelConfig",
    "ConnectionConfig",
    "ContextBudget",
    "ContextOverlay",
    "DaemonConfig",
    "EngineConfig",
    "EngineKind",
    "EngineOverlay",
    "GatewayConfig",
    "MemoryScope",
    "MetricsConfig",
    "NamedEngine",
    "Org",
    "OrgSource",
    "RunScope",
    "Surface",
    "TelemetryConfig",
    "WorkerConfig",
    "identity_path",
    "listen_address",
    "load_org",
    "purpose_path",
)
