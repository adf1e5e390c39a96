"""A typed Python client for the rosterd socket protocol (``rosterd.protocol``)."""

from .._errors import RpcError
from ._client import OnDelta, OnNotification, RosterClient

__all__ = ("OnDelta", "OnNotification", "RosterClient", "RpcError")
