"""Channel messages in the database: ``channel.post`` and every session turn."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..._ids import check_id
from ...compiler import ChannelMessage
from ._db import Database, encode

__all__ = ("PostgresChannels",)

_message = msgspec.json.Decoder(ChannelMessage)

# Posts take their seqs by moving the channel's row on: racing posts, from
# any host, wait for each other's commit on that row, so seqs are distinct
# and a channel's messages become visible in seq order.
_TAKE_SEQS = (
    "INSERT INTO channels (channel, last_seq) VALUES (%s, %s)"
    " ON CONFLICT (channel) DO UPDATE SET last_seq = channels.last_seq + excluded.last_seq"
    " RETURNING last_seq"
)
_INSERT = (
    "INSERT INTO channel_messages (channel, seq, run, record)"
    " SELECT %s, m.seq, %s, m.record FROM unnest(%s::bigint[], %s::text[]) AS m (seq, record)"
)
# Each read below is one statement on the primary key (channel, seq), read
# backwards from the newest: it costs what it returns, never the length of
# the channel.
_RECENT = "SELECT record FROM channel_messages WHERE channel = %s ORDER BY seq DESC LIMIT %s"
_LAST_SEQ = "SELECT last_seq FROM channels WHERE channel = %(channel)s"
# What others posted after a seq: the newest *limit* of them, how many there
# are in all, and the last seq, from one snapshot. Always one row, with a
# NULL record when nothing is kept.
_NEW = (
    "FROM channel_messages WHERE channel = %(channel)s AND seq > %(after)s"
    " AND run IS DISTINCT FROM %(exclude)s"
)
_SINCE = (
    f"SELECT coalesce(({_LAST_SEQ}), 0), (SELECT count(*) {_NEW}), kept.record"
    " FROM (SELECT) AS one"
    f" LEFT JOIN LATERAL (SELECT seq, record {_NEW} ORDER BY seq DESC LIMIT %(limit)s) AS kept"
    " ON true ORDER BY kept.seq"
)


class PostgresChannels:
    """Every channel's messages in table ``channel_messages``, by (channel, seq)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __repr__(self) -> str:
        return f"PostgresChannels({self._db.where!r})"

    async def post_many(
        self, channel: str, posts: Sequence[tuple[str, str, float]], *, run: str | None = None
    ) -> list[ChannelMessage]:
        """Append (sender, text, at) messages in order, in one transaction;
        *run* names the session whose turn they are."""
        check_id("channel", channel)
        if not posts:
            return []
        async with self._db.transaction("post to a channel") as conn:
            cursor = await conn.execute(_TAKE_SEQS, (channel, len(posts)))
            row = await cursor.fetchone()
            assert row is not None  # RETURNING of an upsert always has its row
            first = int(row[0]) - len(posts) + 1
            messages = [
                ChannelMessage(seq=first + n, sender=sender, text=body, at=at, run=run)
                for n, (sender, body, at) in enumerate(posts)
            ]
            await conn.execute(
                _INSERT,
                (channel, run, [m.seq for m in messages], [encode(m) for m in messages]),
            )
        return messages

    async def recent(self, channel: str, limit: int) -> tuple[ChannelMessage, ...]:
        """The newest *limit* messages, oldest first: a history snapshot."""
        check_id("channel", channel)
        if limit <= 0:
            return ()
        rows = await self._db.fetchall("read a channel", _RECENT, (channel, limit))
        return tuple(self._db.decode(_message, row[0]) for row in reversed(rows))

    async def last_seq(self, channel: str) -> int:
        """The seq of the channel's newest message; 0 when it has none."""
        check_id("channel", channel)
        row = await self._db.fetchone("read a channel", _LAST_SEQ, {"channel": channel})
        return 0 if row is None else int(row[0])

    async def since(
        self, channel: str, after: int, *, exclude_run: str, limit: int
    ) -> tuple[tuple[ChannelMessage, ...], int, int]:
        """What others posted after seq *after*: the newest *limit* messages not
        posted by *exclude_run*, oldest first; how many earlier ones are left
        out; and the channel's last seq. One statement over the messages
        after *after* only."""
        check_id("channel", channel)
        params = {
            "channel": channel,
            "after": after,
            "exclude": exclude_run,
            "limit": max(0, limit),
        }
        rows = await self._db.fetchall("read a channel", _SINCE, params)
        kept = tuple(self._db.decode(_message, row[2]) for row in rows if row[2] is not None)
        last, others = int(rows[0][0]), int(rows[0][1])
        return kept, others - len(kept), last
