"""Engines: the model providers a compiled request is sent to."""

from ._admission import Admission
from ._anthropic import (
    ANTHROPIC_VERSION,
    CACHE_DIAGNOSIS_BETA,
    DEFAULT_ANTHROPIC_URL,
    AnthropicEngine,
)
from ._base import (
    MAX_BREAKPOINTS,
    DeltaSink,
    Engine,
    EngineReply,
    EngineRequest,
    WaitSink,
)
from ._echo import EchoEngine
from ._factory import ENGINES, EngineKindSpec, open_engine
from ._http import Backoff
from ._openai import DEFAULT_OPENAI_URL, OpenAIEngine

__all__ = (
    "ANTHROPIC_VERSION",
    "CACHE_DIAGNOSIS_BETA",
    "DEFAULT_ANTHROPIC_URL",
    "DEFAULT_OPENAI_URL",
    "ENGINES",
    "MAX_BREAKPOINTS",
    "Admission",
    "AnthropicEngine",
    "Backoff",
    "DeltaSink",
    "EchoEngine",
    "Engine",
    "EngineKindSpec",
    "EngineReply",
    "EngineRequest",
    "OpenAIEngine",
    "WaitSink",
    "open_engine",
)
