"""Chat networks as rosterd frontends: ``roster bridge irc`` (``rosterd[irc]``)."""

from .._bridge_defaults import MENTION_RATE, PRIVATE_RATE, SEND_RATE, Rate
from ._bridge import BridgeConfig, IrcBridge
from ._irc import IrcLink, IrcMessage
from ._lines import IRC_LINE_BYTES, addressed, clean, reply_lines

__all__ = (
    "IRC_LINE_BYTES",
    "MENTION_RATE",
    "PRIVATE_RATE",
    "SEND_RATE",
    "BridgeConfig",
    "IrcBridge",
    "IrcLink",
    "IrcMessage",
    "Rate",
    "addressed",
    "clean",
    "reply_lines",
)
