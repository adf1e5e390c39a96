"""Choosing an engine from ``[engine]`` configuration."""

from __future__ import annotations

from collections.abc import Mapping

from .._errors import ConfigError
from ..org import EngineConfig
from ._base import Engine
from ._echo import EchoEngine

__all__ = ("open_engine",)


def open_engine(config: EngineConfig, env: Mapping[str, str]) -> Engine:
    """An engine for *config*; the caller owns it and must ``aclose()`` it.

    API keys are read from *env* by the name in ``api_key_env``; the value is
    never logged, traced or put in an error.
    """
    if config.kind == "echo":
        return EchoEngine()
    raise ConfigError(
        f"engine kind {config.kind!r} is not available", path="org.toml", key="engine.kind"
    )
