"""The IRC bridge's defaults: how long it waits for a speaker's next line,
how many lines a reply takes, how fast it sends lines, and how many turns
one person may cost it. Here, outside ``rosterd.bridge`` and on the standard
library alone, so that ``roster bridge irc`` states them as its defaults
without loading the irc library (or msgspec) for ``--help``.

A ``Rate`` is a token bucket's (``rosterd.bridge._budget``): a burst at
once, then one per interval. RFC 1459's flood control (each line puts the
sender 2 s ahead, and a server stops reading a client more than 10 s
ahead) is a bucket of 5 and 2 s, which is also what IRC clients send at
(irssi's defaults).
"""

from __future__ import annotations

from typing import NamedTuple

# A speaker's lines less than this apart are one burst: people type a
# thought over several lines.
DEBOUNCE_S = 1.5
# The most lines a reply takes; the last of them says where the rest is.
MAX_LINES = 8


class Rate(NamedTuple):
    """*burst* lines at once, then one per *interval_s* (0: no limit)."""

    burst: int
    interval_s: float

    def __str__(self) -> str:
        return f"{self.burst}, then one per {self.interval_s:g} s"


# What IRC clients send at, within RFC 1459's flood control.
SEND_RATE = Rate(5, 2.0)
# What one person may send the bridge in private: each line costs a turn,
# and nobody else sees them.
PRIVATE_RATE = Rate(5, 30.0)
# What one person may ask the worker in a channel: each addressed burst
# (however many lines) costs a turn. Someone in a conversation asks, reads
# the reply and asks again, seldom more than a few times a minute once
# past the first questions; a flood is held to three turns a minute, in
# front of the channel and its operators, so a little more than in private.
MENTION_RATE = Rate(5, 20.0)
