"""A Python client for the rosterd socket protocol."""

from ._client import RosterClient, RpcError

__all__ = ("RosterClient", "RpcError")
