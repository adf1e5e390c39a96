"""Where a session's conversation stands between turns.

A ``Progress`` is immutable. A turn starts from the session's current one
and, whatever way it ends, the session commits the one that turn leads to:
answered, failed (the turn's number is used, and the user turn it sent
stays in the transcript), or refused as too long (the conversation is as it
was before the turn, which a new session answers). Nothing is undone by
hand: a turn that fails part way simply commits a different next state.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..engines import EngineReply
from ..protocol import CacheLifetime, ChatMessage, TranscriptEntry
from ._lifetime import RECENT_GAPS

# Send times kept: enough for the gaps a cache lifetime is chosen from.
_TURN_TIMES = RECENT_GAPS + 1


class Progress(msgspec.Struct, frozen=True):
    """A session's state between turns.

    ``chars`` is the request so far (the system part and the first
    ``messages`` messages of the transcript); ``seen`` the channel seq the
    session's input has covered, so later posts by others are the backlog
    of its next turn; ``briefed_at`` when it was last briefed, so gates
    resolved since show their outcome next; ``turn_times`` when its recent
    turns were sent and ``last_ttl`` the cache lifetime the last one asked
    for, what the next lifetime is chosen from.
    """

    turns: int
    chars: int
    messages: int
    seen: int
    briefed_at: float
    last_activity: float
    last_input_tokens: int | None = None
    turn_times: tuple[float, ...] = ()
    last_ttl: CacheLifetime | None = None
    last_reply_id: str | None = None

    @classmethod
    def resumed(
        cls,
        entries: Sequence[TranscriptEntry],
        system_chars: int,
        transcript: Sequence[ChatMessage],
        *,
        last_turn: int,
        created_at: float,
        seen: int,
        briefed_at: float | None,
    ) -> Progress:
        """Where a run's transcript *entries* leave its session (none: a
        fresh one, which has seen up to *seen* and been briefed at
        *briefed_at*, or when it was created)."""
        return cls(
            turns=max(last_turn, *(entry.turn for entry in entries), 0),
            chars=system_chars + sum(len(message.content) for message in transcript),
            messages=len(transcript),
            seen=next((e.seen for e in reversed(entries) if e.seen is not None), seen),
            briefed_at=next(
                (e.at for e in reversed(entries) if e.role == "user"),
                created_at if briefed_at is None else briefed_at,
            ),
            last_activity=entries[-1].at if entries else created_at,
            last_input_tokens=next(
                (e.usage.input_tokens for e in reversed(entries) if e.usage is not None), None
            ),
            turn_times=tuple(e.at for e in entries if e.role == "user" and e.step == 1)[
                -_TURN_TIMES:
            ],
            last_ttl=next(
                (e.cache.ttl for e in reversed(entries) if e.cache is not None and e.cache.ttl),
                None,
            ),
            last_reply_id=next(
                (e.provider_id for e in reversed(entries) if e.provider_id is not None), None
            ),
        )

    def sent(self, added: Sequence[ChatMessage], last_seq: int) -> Progress:
        """After a turn added *added* to the transcript: the request grew,
        and its input, backlog included, covers up to *last_seq*."""
        if not added:
            return self
        return msgspec.structs.replace(
            self,
            chars=self.chars + sum(len(message.content) for message in added),
            messages=self.messages + len(added),
            seen=last_seq,
        )

    def failed(self, turn: int, at: float, *, briefed_at: float) -> Progress:
        """Turn *turn* failed: the next turn gets the next number."""
        return msgspec.structs.replace(self, turns=turn, last_activity=at, briefed_at=briefed_at)

    def answered(
        self, turn: int, sent_at: float, at: float, ttl: CacheLifetime | None, reply: EngineReply
    ) -> Progress:
        """Turn *turn*, sent at *sent_at* asking the provider to keep the
        prefix for *ttl*, was answered with *reply*."""
        return msgspec.structs.replace(
            self,
            turns=turn,
            briefed_at=sent_at,
            last_activity=at,
            turn_times=(*self.turn_times, sent_at)[-_TURN_TIMES:],
            last_ttl=ttl,
            last_reply_id=reply.message_id or self.last_reply_id,
            # Unreported usage keeps the last known size: a lower bound, as
            # the request only grows.
            last_input_tokens=(
                reply.usage.input_tokens if reply.usage is not None else self.last_input_tokens
            ),
        )
