"""Engines: the model providers a compiled request is sent to."""

from ._base import ChatMessage, DeltaSink, Engine, EngineReply, EngineRequest, Usage
from ._echo import EchoEngine
from ._factory import open_engine

__all__ = (
    "ChatMessage",
    "DeltaSink",
    "EchoEngine",
    "Engine",
    "EngineReply",
    "EngineRequest",
    "Usage",
    "open_engine",
)
