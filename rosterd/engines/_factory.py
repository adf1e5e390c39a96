"""Choosing an engine from ``[engine]`` configuration."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .._errors import ConfigError
from ..org import EngineConfig
from ._anthropic import AnthropicEngine
from ._base import Engine
from ._echo import EchoEngine
from ._openai import OpenAIEngine

__all__ = ("open_engine",)


def open_engine(
    config: EngineConfig,
    env: Mapping[str, str],
    on_response: Callable[[int, Mapping[str, str]], None] | None = None,
) -> Engine:
    """An engine for *config*; the caller owns it and must ``aclose()`` it.
    *on_response* hears the status and headers of each provider response.

    API keys are read from *env* by the name in ``api_key_env``; the value is
    never logged, traced or put in an error. Without ``api_key_env`` no key
    is sent, as local OpenAI-compatible servers (vLLM, llama.cpp, Ollama)
    expect.
    """
    if config.kind == "echo":
        return EchoEngine()
    if not config.model:
        raise ConfigError(
            f"engine kind {config.kind!r} needs engine.model to name a model",
            path="org.toml",
            key="engine.model",
        )
    api_key: str | None = None
    if config.api_key_env is not None:
        api_key = env.get(config.api_key_env)
        if not api_key:
            raise ConfigError(
                f"engine.api_key_env names ${config.api_key_env}, which is not set or empty",
                path="org.toml",
                key="engine.api_key_env",
            )
    if config.kind == "openai":
        return OpenAIEngine(config, api_key=api_key, on_response=on_response)
    if config.kind == "anthropic":
        return AnthropicEngine(config, api_key=api_key, on_response=on_response)
    raise ConfigError(
        f"engine kind {config.kind!r} is not available", path="org.toml", key="engine.kind"
    )
