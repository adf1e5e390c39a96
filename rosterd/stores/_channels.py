"""The channel message log: ``channel.post`` and every session turn."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path

import anyio

from .._ids import check_id
from ..compiler import ChannelMessage
from ._files import JsonlLog

__all__ = ("ChannelStore",)

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
        # Numbering and appending happen under one lock, so the file is in
        # seq order and racing posts never share a number.
        self.lock = anyio.Lock()

    def remember(self, messages: Sequence[ChannelMessage]) -> None:
        for message in messages:
            self.recent.append(message)
            self._chars += len(message.text)
        # The newest message always stays, however long.
        while len(self.recent) > 1 and (
            len(self.recent) > _KEEP_IN_MEMORY or self._chars > _KEEP_CHARS
        ):
            self._chars -= len(self.recent.popleft().text)


class ChannelStore:
    """One append-only log per channel under ``channels/<id>.jsonl``."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._channels: dict[str, _Channel] = {}

    def __repr__(self) -> str:
        return f"ChannelStore({str(self._root)!r}, {len(self._channels)} open)"

    async def post(self, channel: str, sender: str, text: str, at: float) -> ChannelMessage:
        (message,) = await self.post_many(channel, [(sender, text, at)])
        return message

    async def post_many(
        self, channel: str, posts: Sequence[tuple[str, str, float]]
    ) -> list[ChannelMessage]:
        """Append (sender, text, at) messages in order, with one fsync."""
        state = await self._open(channel)
        async with state.lock:
            messages = [
                ChannelMessage(seq=state.next_seq + n, sender=sender, text=text, at=at)
                for n, (sender, text, at) in enumerate(posts)
            ]
            await state.log.extend(messages)
            state.next_seq += len(messages)
            state.remember(messages)
        return messages

    async def recent(self, channel: str, limit: int) -> tuple[ChannelMessage, ...]:
        """The newest *limit* messages, oldest first: a history snapshot."""
        if limit <= 0:
            return ()
        state = await self._open(channel)
        return tuple(state.recent)[-limit:]

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
