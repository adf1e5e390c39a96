"""Channel messages in the database: ``channel.post`` and every session turn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import LiteralString

import msgspec

from ..._ids import check_id
from ...compiler import ChannelMessage
from .._tail import ChannelTail
from ._db import Database, Row, encode

_message = msgspec.json.Decoder(ChannelMessage)

# Posts take their seqs by moving the channel's row on: racing posts, from
# any host, wait for each other's commit on that row, so seqs are distinct
# and a channel's messages become visible in seq order. One statement, so
# that it can go in a pipeline with a turn's other writes: each record is
# the file backend's line, its seq (the first field) put in by the server.
POST: LiteralString = (
    "WITH taken AS ("
    " INSERT INTO channels (channel, last_seq) VALUES (%(channel)s, %(count)s)"
    " ON CONFLICT (channel) DO UPDATE SET last_seq = channels.last_seq + excluded.last_seq"
    " RETURNING last_seq - %(count)s AS before)"
    " INSERT INTO channel_messages (channel, seq, run, record)"
    " SELECT %(channel)s, taken.before + m.i, %(run)s,"
    " '{\"seq\":' || (taken.before + m.i) || m.rest"
    " FROM taken, unnest(%(rests)b::text[]) WITH ORDINALITY AS m (rest, i)"
    " RETURNING seq"
)
_SEQ_HEAD = '{"seq":0'
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
    """Every channel's messages in table ``channel_messages``, by (channel, seq).

    This host keeps each channel's tail: what it posted and read since it
    last read the channel, so a warm session's backlog (``cached``) needs
    no query. A post of another host is not in it; a warm turn's first
    write checks the channel's last seq (``last_known``) and fails when it
    moved on, and the session reads it again.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._tails: dict[str, ChannelTail] = {}

    def __repr__(self) -> str:
        return f"PostgresChannels({self._db.where!r}, {len(self._tails)} tails)"

    async def post_many(
        self, channel: str, posts: Sequence[tuple[str, str, float]], *, run: str | None = None
    ) -> list[ChannelMessage]:
        """Append (sender, text, at) messages in order, in one statement;
        *run* names the session whose turn they are."""
        if not posts:
            check_id("channel", channel)
            return []
        params = self.post_params(channel, posts, run)
        rows = await self._db.fetchall("post to a channel", POST, params)
        return self.posted(channel, posts, run, rows)

    def post_params(
        self, channel: str, posts: Sequence[tuple[str, str, float]], run: str | None
    ) -> Mapping[str, object]:
        """``POST``'s parameters for *posts*."""
        check_id("channel", channel)
        rests = []
        for sender, body, at in posts:
            line = encode(ChannelMessage(seq=0, sender=sender, text=body, at=at, run=run))
            assert line.startswith(_SEQ_HEAD), line  # seq is the record's first field
            rests.append(line[len(_SEQ_HEAD) :])
        return {"channel": channel, "count": len(posts), "run": run, "rests": rests}

    def posted(
        self,
        channel: str,
        posts: Sequence[tuple[str, str, float]],
        run: str | None,
        rows: Sequence[Row],
    ) -> list[ChannelMessage]:
        """The messages ``POST`` stored (*rows*: its seqs), kept in the tail."""
        first = min(int(row[0]) for row in rows)
        messages = [
            ChannelMessage(seq=first + n, sender=sender, text=body, at=at, run=run)
            for n, (sender, body, at) in enumerate(posts)
        ]
        tail = self._tails.get(channel)
        if tail is not None and first == tail.last + 1:
            tail.remember(messages)
        elif tail is not None and messages[-1].seq > tail.last:
            # Others posted in between: this host does not hold their messages.
            self._tails[channel] = ChannelTail(messages[-1].seq)
        return messages

    def last_known(self, channel: str) -> int | None:
        """The channel's last seq as this host knows it; ``None`` if it does not."""
        tail = self._tails.get(channel)
        return None if tail is None else tail.last

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
        self, channel: str, after: int, *, exclude_run: str, limit: int, cached: bool = False
    ) -> tuple[tuple[ChannelMessage, ...], int, int]:
        """What others posted after seq *after*: the newest *limit* messages not
        posted by *exclude_run*, oldest first; how many earlier ones are left
        out; and the channel's last seq. One statement over the messages
        after *after* only, or (*cached*) none when the tail holds them."""
        check_id("channel", channel)
        tail = self._tails.get(channel)
        if cached and tail is not None and after >= tail.base:
            return tail.since(after, exclude_run, limit)
        params = {
            "channel": channel,
            "after": after,
            "exclude": exclude_run,
            "limit": max(0, limit),
        }
        rows = await self._db.fetchall("read a channel", _SINCE, params)
        kept = tuple(self._db.decode(_message, row[2]) for row in rows if row[2] is not None)
        last, others = int(rows[0][0]), int(rows[0][1])
        if tail is None or last > tail.last:
            self._tails[channel] = ChannelTail(last)
        return kept, others - len(kept), last
