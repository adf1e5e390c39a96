"""A typed Python client for the rosterd socket protocol (``rosterd.protocol``)."""

from .._errors import RpcError
from ._client import OnDelta, OnNotification, OnWait, RosterClient

__all__ = ("OnDelta", "OnNotification", "OnWait", "RosterClient", "RpcError")
