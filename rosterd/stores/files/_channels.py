"""The channel message log: ``channel.post`` and every session turn."""

from __future__ import annotations

from collections.abc import Sequence

from ..._ids import check_id
from ...compiler import ChannelMessage
from .._tail import ChannelTail, tail_filled
from ._jsonl import JsonlLog, Placed
from ._opened import Opened


class _Channel:
    """A channel's log, the tail this daemon holds of it, and its next seq:
    taken as a post is placed in the log, before its write, while the
    tail's ``last`` moves on only once a post is durable."""

    def __init__(self, log: JsonlLog[ChannelMessage], messages: list[ChannelMessage]) -> None:
        self.log = log
        last = max((m.seq for m in messages), default=0)
        self.tail = ChannelTail(last, messages)
        self.next_seq = last + 1

    async def aclose(self) -> None:
        await self.log.aclose()


class FileChannels(Opened[_Channel]):
    """One append-only log per channel under ``channels/<id>.jsonl``."""

    async def post_many(
        self, channel: str, posts: Sequence[tuple[str, str, float]], *, run: str | None = None
    ) -> list[ChannelMessage]:
        """Append (sender, text, at) messages in order, with one fsync; *run*
        names the session whose turn they are."""
        messages, placed = await self.place_many(channel, posts, run=run)
        await placed.durable()
        return messages

    async def place_many(
        self, channel: str, posts: Sequence[tuple[str, str, float]], *, run: str | None = None
    ) -> tuple[list[ChannelMessage], Placed]:
        """``post_many``'s messages, placed in the channel's log: their
        write is under way once this returns."""
        state = await self._get(channel)
        # Numbered and placed in the log with no await between, so the file
        # is in seq order; racing posts share a write. A failed write leaves
        # its numbers unused.
        messages = [
            ChannelMessage(seq=state.next_seq + n, sender=sender, text=text, at=at, run=run)
            for n, (sender, text, at) in enumerate(posts)
        ]
        placed = state.log.place(messages, lambda: state.tail.remember(messages))
        state.next_seq += len(messages)
        return messages, placed

    async def recent(self, channel: str, limit: int) -> tuple[ChannelMessage, ...]:
        """The newest *limit* messages, oldest first: a history snapshot."""
        if limit <= 0:
            return ()
        return (await self._get(channel)).tail.newest(limit)

    async def last_seq(self, channel: str) -> int:
        """The seq of the channel's newest message; 0 when it has none."""
        return (await self._get(channel)).tail.last

    async def since(
        self, channel: str, after: int, *, exclude_run: str, limit: int, cached: bool = False
    ) -> tuple[tuple[ChannelMessage, ...], int, int]:
        """What others posted after seq *after*: the newest *limit* messages not
        posted by *exclude_run*, oldest first; how many earlier ones are left
        out; and the channel's last seq (``ChannelTail.since``: ones older
        than the tail are counted as left out, never read from disk). The
        daemon holding the directory writes every post: what it holds is
        always current, *cached* or not.
        """
        return (await self._get(channel)).tail.since(after, exclude_run, limit)

    async def _open(self, channel: str) -> _Channel:
        path = self._root / f"{check_id('channel', channel)}.jsonl"
        # Only the tail: the log may hold years of posts.
        log, messages = await JsonlLog.open(path, ChannelMessage, tail_filled())
        return _Channel(log, messages)
