"""The daemon: Unix-socket JSON-RPC server, file watching and systemd glue."""

from ._daemon import default_socket_path, run_daemon
from ._protocol import LINE_LIMIT, METHODS
from ._results import (
    BlockSummary,
    Closed,
    Delta,
    RunShown,
    SessionOpened,
    StatusResult,
    TurnResult,
)
from ._systemd import Notifier, listen_fds, watchdog_interval
from ._watch import OrgWatcher, describe_over_budget

__all__ = (
    "LINE_LIMIT",
    "METHODS",
    "BlockSummary",
    "Closed",
    "Delta",
    "Notifier",
    "OrgWatcher",
    "RunShown",
    "SessionOpened",
    "StatusResult",
    "TurnResult",
    "default_socket_path",
    "describe_over_budget",
    "listen_fds",
    "run_daemon",
    "watchdog_interval",
)
