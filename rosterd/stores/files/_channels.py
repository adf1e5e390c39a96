"""The channel message log: ``channel.post`` and every session turn."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path

from ..._ids import check_id
from ...compiler import ChannelMessage
from ._jsonl import JsonlLog

__all__ = ("FileChannels",)

# More than any history budget needs; older messages stay on disk only.
# Bounded in characters too: a few huge posts must not pin gigabytes.
_KEEP_IN_MEMORY = 1000
_KEEP_CHARS = 4 * 1024 * 1024


class _Channel:
    def __init__(self, log: JsonlLog[ChannelMessage], messages: list[ChannelMessage]) -> None:
        self.log = log
        self.recent: deque[ChannelMessage] = deque()
        self._chars = 0
        self.remember(messages)
        self.next_seq = max((m.seq for m in messages), default=0) + 1

    def remember(self, messages: Sequence[ChannelMessage]) -> None:
        for message in messages:
            self.recent.append(message)
            self._chars += len(message.text)
        # The newest message always stays, however long.
        while len(self.recent) > 1 and (
            len(self.recent) > _KEEP_IN_MEMORY or self._chars > _KEEP_CHARS
        ):
            self._chars -= len(self.recent.popleft().text)


class FileChannels:
    """One append-only log per channel under ``channels/<id>.jsonl``."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._channels: dict[str, _Channel] = {}

    def __repr__(self) -> str:
        return f"FileChannels({str(self._root)!r}, {len(self._channels)} open)"

    async def post_many(
        self, channel: str, posts: Sequence[tuple[str, str, float]], *, run: str | None = None
    ) -> list[ChannelMessage]:
        """Append (sender, text, at) messages in order, with one fsync; *run*
        names the session whose turn they are."""
        state = await self._open(channel)
        # Numbered and placed in the log with no await between, so the file
        # is in seq order; racing posts share a write. A failed write leaves
        # its numbers unused.
        messages = [
            ChannelMessage(seq=state.next_seq + n, sender=sender, text=text, at=at, run=run)
            for n, (sender, text, at) in enumerate(posts)
        ]
        state.next_seq += len(messages)
        await state.log.extend(messages, lambda: state.remember(messages))
        return messages

    async def recent(self, channel: str, limit: int) -> tuple[ChannelMessage, ...]:
        """The newest *limit* messages, oldest first: a history snapshot."""
        if limit <= 0:
            return ()
        state = await self._open(channel)
        return tuple(state.recent)[-limit:]

    async def last_seq(self, channel: str) -> int:
        """The seq of the channel's newest message; 0 when it has none."""
        state = await self._open(channel)
        return state.next_seq - 1

    async def since(
        self, channel: str, after: int, *, exclude_run: str, limit: int, cached: bool = False
    ) -> tuple[tuple[ChannelMessage, ...], int, int]:
        """What others posted after seq *after*: the newest *limit* messages not
        posted by *exclude_run*, oldest first; how many earlier ones are left
        out; and the channel's last seq.

        Only messages after *after* are looked at, newest first, so the cost
        follows what is new, not how long the channel is. Ones older than
        the in-memory window are counted as left out, never read from disk.
        The daemon holding the directory writes every post: what it holds
        is always current, *cached* or not.
        """
        state = await self._open(channel)
        last = state.next_seq - 1
        kept: list[ChannelMessage] = []
        others = 0
        oldest = last + 1
        for message in reversed(state.recent):
            if message.seq <= after:
                break
            oldest = message.seq
            if message.run is not None and message.run == exclude_run:
                continue
            others += 1
            if len(kept) < limit:
                kept.append(message)
        others += max(0, oldest - after - 1)
        kept.reverse()
        return tuple(kept), others - len(kept), last

    async def _open(self, channel: str) -> _Channel:
        state = self._channels.get(channel)
        if state is None:
            path = self._root / f"{check_id('channel', channel)}.jsonl"
            log, messages = await JsonlLog.open(path, ChannelMessage)
            state = self._channels.setdefault(channel, _Channel(log, messages))
            if state.log is not log:
                await log.aclose()
        return state

    async def aclose(self) -> None:
        for state in self._channels.values():
            await state.log.aclose()
        self._channels.clear()
