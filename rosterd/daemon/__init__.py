"""The daemon: Unix-socket JSON-RPC server, file watching and systemd glue.

The wire format it serves is ``rosterd.protocol``.
"""

from ._daemon import run_daemon
from ._methods import HANDLED
from ._systemd import Notifier, listen_fds, watchdog_interval
from ._watch import OrgWatcher

__all__ = (
    "HANDLED",
    "Notifier",
    "OrgWatcher",
    "listen_fds",
    "run_daemon",
    "watchdog_interval",
)
