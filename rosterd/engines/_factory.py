"""The engines, registered by kind, and choosing one from ``[engine]``.

An engine kind is one entry of ``ENGINES``: how to open it, and whether it
needs a model. Everything that differs between providers beyond that is the
engine's own (its request shape, its error wording, ``measures_cache``).
The kind's name is declared with the configuration (``org.EngineKind``),
which a test holds to this table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import httpx

from .._errors import ConfigError
from ..org import EngineConfig
from ._anthropic import AnthropicEngine
from ._base import Engine
from ._echo import EchoEngine
from ._openai import OpenAIEngine

# What an API key may hold: visible ASCII, so it fits in a header as it is.
_HEADER_TOKEN = re.compile(r"[\x21-\x7e]+")

OnResponse = Callable[[int, Mapping[str, str]], None]


class _Opener(Protocol):
    def __call__(
        self,
        config: EngineConfig,
        *,
        api_key: str | None,
        on_response: OnResponse | None,
        transport: httpx.AsyncBaseTransport | None,
    ) -> Engine: ...


@dataclass(frozen=True)
class EngineKindSpec:
    """One kind of engine: how it opens, and whether it needs a model."""

    open: _Opener
    needs_model: bool = True


def _echo(
    config: EngineConfig,
    *,
    api_key: str | None,
    on_response: OnResponse | None,
    transport: httpx.AsyncBaseTransport | None,
) -> Engine:
    return EchoEngine()


ENGINES: dict[str, EngineKindSpec] = {
    "echo": EngineKindSpec(_echo, needs_model=False),
    "openai": EngineKindSpec(OpenAIEngine),
    "anthropic": EngineKindSpec(AnthropicEngine),
}


def open_engine(
    config: EngineConfig,
    env: Mapping[str, str],
    on_response: OnResponse | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Engine:
    """An engine for *config*; the caller owns it and must ``aclose()`` it.
    *on_response* hears the status and headers of each provider response;
    *transport* stands in for the network (``httpx.MockTransport``).

    API keys are read from *env* by the name in ``api_key_env``; the value is
    never logged, traced or put in an error. Without ``api_key_env`` no key
    is sent, as local OpenAI-compatible servers (vLLM, llama.cpp, Ollama)
    expect.
    """
    spec = ENGINES.get(config.kind)
    if spec is None:
        raise ConfigError(
            f"engine kind {config.kind!r} is not available", path="org.toml", key="engine.kind"
        )
    if spec.needs_model and not config.model:
        raise ConfigError(
            f"engine kind {config.kind!r} needs engine.model to name a model",
            path="org.toml",
            key="engine.model",
        )
    api_key: str | None = None
    if config.api_key_env is not None:
        # A key read from a file often ends in a newline: surrounding
        # whitespace is no part of any key.
        api_key = env.get(config.api_key_env, "").strip()
        if not api_key:
            raise ConfigError(
                f"engine.api_key_env names ${config.api_key_env}, which is not set or empty",
                path="org.toml",
                key="engine.api_key_env",
            )
        if not _HEADER_TOKEN.fullmatch(api_key):
            # The HTTP client would refuse the header, quoting the key.
            raise ConfigError(
                f"engine.api_key_env names ${config.api_key_env}, whose value has a space, "
                "a control or a non-ASCII character: no API key has one",
                path="org.toml",
                key="engine.api_key_env",
            )
    return spec.open(config, api_key=api_key, on_response=on_response, transport=transport)
