"""Org configuration: org.toml and the trusted files it refers to."""

from ._config import (
    ChannelConfig,
    ConnectionConfig,
    ContextBudget,
    ContextOverlay,
    DaemonConfig,
    EngineConfig,
    EngineKind,
    EngineOverlay,
    WorkerConfig,
)
from ._load import identity_path, load_org, purpose_path
from ._org import Org, RunScope, Surface

__all__ = (
    "ChannelConfig",
    "ConnectionConfig",
    "ContextBudget",
    "ContextOverlay",
    "DaemonConfig",
    "EngineConfig",
    "EngineKind",
    "EngineOverlay",
    "Org",
    "RunScope",
    "Surface",
    "WorkerConfig",
    "identity_path",
    "load_org",
    "purpose_path",
)
