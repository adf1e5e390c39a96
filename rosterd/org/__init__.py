"""Org configuration: org.toml and the trusted files it refers to."""

from ._config import (
    FILE_GATE,
    ChannelConfig,
    ConnectionConfig,
    ContextBudget,
    ContextOverlay,
    DaemonConfig,
    EngineConfig,
    EngineKind,
    EngineOverlay,
    GatewayConfig,
    WorkerConfig,
)
from ._load import identity_path, load_org, purpose_path
from ._org import Org, RunScope, Surface
from ._source import OrgSource

__all__ = (
    "FILE_GATE",
    "ChannelConfig",
    "ConnectionConfig",
    "ContextBudget",
    "ContextOverlay",
    "DaemonConfig",
    "EngineConfig",
    "EngineKind",
    "EngineOverlay",
    "GatewayConfig",
    "Org",
    "OrgSource",
    "RunScope",
    "Surface",
    "WorkerConfig",
    "identity_path",
    "load_org",
    "purpose_path",
)
