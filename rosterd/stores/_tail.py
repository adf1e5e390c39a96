"""A channel's newest messages as a host holds them, on every backend."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from ..compiler import ChannelMessage

# More than any history or backlog budget needs; older messages are left to
# the store. Bounded in characters too: a few huge posts must not pin
# gigabytes.
_KEEP = 1000
_KEEP_CHARS = 4 * 1024 * 1024


def tail_filled() -> Callable[[ChannelMessage], bool]:
    """Shown a channel's messages newest first, whether a tail holds no
    older one: a log need be read back only that far."""
    count = chars = 0

    def filled(message: ChannelMessage) -> bool:
        nonlocal count, chars
        count += 1
        chars += len(message.text)
        return count >= _KEEP or chars >= _KEEP_CHARS

    return filled


class ChannelTail:
    """The newest messages of one channel, in seq order, up to ``_KEEP`` of
    them and ``_KEEP_CHARS`` characters (the newest always stays, however
    long); every message after ``base`` up to ``last`` is held. ``last`` is
    the channel's last seq as far as this host knows: a message counts once
    it is durable and remembered here."""

    def __init__(self, last: int, messages: Iterable[ChannelMessage] = ()) -> None:
        self.last = last
        self._messages: deque[ChannelMessage] = deque()
        self._chars = 0
        self.remember(messages)

    def __repr__(self) -> str:
        return f"ChannelTail({self.base}..{self.last})"

    @property
    def base(self) -> int:
        """The seq before the oldest message held (``last`` if none is):
        what a host remembers follows on from what it knew."""
        return self._messages[0].seq - 1 if self._messages else self.last

    def remember(self, messages: Iterable[ChannelMessage]) -> None:
        """Hold *messages*, newer than every message held."""
        held = self._messages
        for message in messages:
            held.append(message)
            self._chars += len(message.text)
            self.last = message.seq
        while len(held) > 1 and (len(held) > _KEEP or self._chars > _KEEP_CHARS):
            self._chars -= len(held.popleft().text)

    def newest(self, limit: int) -> tuple[ChannelMessage, ...]:
        """The newest *limit* messages held, oldest first."""
        held = self._messages
        start = max(0, len(held) - limit)
        return tuple(held[n] for n in range(start, len(held)))

    def since(
        self, after: int, exclude_run: str, limit: int
    ) -> tuple[tuple[ChannelMessage, ...], int, int]:
        """What others posted after seq *after*: the newest *limit* messages
        not posted by *exclude_run*, oldest first; how many earlier ones are
        left out (those before ``base`` counted, never read); and ``last``.

        Only messages after *after* are looked at, newest first, so the cost
        follows what is new, not how much is held.
        """
        kept: list[ChannelMessage] = []
        others = 0
        oldest = self.last + 1
        for message in reversed(self._messages):
            if message.seq <= after:
                break
            oldest = message.seq
            if message.run is not None and message.run == exclude_run:
                continue
            others += 1
            if len(kept) < limit:
                kept.append(message)
        others += max(0, min(oldest - 1, self.base) - after)
        kept.reverse()
        return tuple(kept), others - len(kept), self.last
