"""Chat networks as rosterd frontends: ``roster bridge irc`` (``rosterd[irc]``)."""

from ._bridge import BridgeConfig, IrcBridge
from ._budget import Rate
from ._irc import IrcLink, IrcMessage
from ._lines import IRC_LINE_BYTES, addressed, clean, reply_lines

__all__ = (
    "IRC_LINE_BYTES",
    "BridgeConfig",
    "IrcBridge",
    "IrcLink",
    "IrcMessage",
    "Rate",
    "addressed",
    "clean",
    "reply_lines",
)
