"""The trace inspector: what did the worker see, in a browser (``rosterd[inspect]``)."""

from ._app import COOKIE, create_app
from ._serve import MAX_CONNECTIONS, serve_inspector
from ._views import FAILED_SHOWN

__all__ = ("COOKIE", "FAILED_SHOWN", "MAX_CONNECTIONS", "create_app", "serve_inspector")
