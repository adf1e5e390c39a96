"""Token buckets: how fast the bridge sends lines, and how many turns one
host may cost it.

A bucket of a ``Rate`` (``rosterd._bridge_defaults``, with the rates and why) holds
at most its ``burst`` of tokens and gains one each ``interval_s`` of its
clock; a line spends one. So a burst goes at once, and after it one line
per interval. An interval of 0 is no limit.
"""

from __future__ import annotations

import msgspec

from .._bridge_defaults import Rate


class TokenBucket:
    """At most *rate*'s burst of tokens, one more each of its intervals;
    full at *now*."""

    def __init__(self, rate: Rate, now: float) -> None:
        self._rate = rate
        self._tokens = float(rate.burst)
        self._at = now

    def __repr__(self) -> str:
        return f"TokenBucket({self._tokens:.2f} left of {self._rate})"

    def wait(self, now: float) -> float:
        """Seconds from *now* until a token is there; 0 when one is."""
        self._refill(now)
        return max(0.0, (1.0 - self._tokens) * self._rate.interval_s)

    def spend(self, now: float) -> None:
        """Spend a token (one the caller waited for, so never far below 0)."""
        self._refill(now)
        self._tokens -= 1.0

    def full(self, now: float) -> bool:
        self._refill(now)
        return self._tokens >= self._rate.burst

    def _refill(self, now: float) -> None:
        burst, interval_s = self._rate.burst, self._rate.interval_s
        if interval_s <= 0:
            self._tokens = float(burst)
        else:
            # A clock read twice never goes back; max() keeps a bucket whole
            # if one that can is ever given.
            gained = max(0.0, now - self._at) / interval_s
            self._tokens = min(float(burst), self._tokens + gained)
        self._at = now


class Refused(msgspec.Struct, frozen=True):
    """A turn over its host's budget: the seconds until the host may have
    another, and whether this is the first refused since one was taken."""

    wait_s: float
    first: bool


class _Account:
    __slots__ = ("bucket", "told")

    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket
        self.told = False


class HostBudgets:
    """A bucket per host, made at its first turn and dropped once full
    again, so a host that stops costs nothing and the table holds only
    hosts that spoke within the last ``burst`` intervals."""

    def __init__(self, rate: Rate) -> None:
        self.rate = rate
        # Least recently used first: the first to be full again.
        self._accounts: dict[str, _Account] = {}

    def __repr__(self) -> str:
        return f"HostBudgets({len(self._accounts)} hosts, {self.rate})"

    def take(self, host: str, now: float) -> Refused | None:
        """Spend one of *host*'s tokens (``None``), or say why not."""
        self._forget_full(now)
        account = self._accounts.pop(host, None)
        if account is None:
            account = _Account(TokenBucket(self.rate, now))
        self._accounts[host] = account
        wait = account.bucket.wait(now)
        if wait > 0:
            first, account.told = not account.told, True
            return Refused(wait, first)
        account.bucket.spend(now)
        account.told = False
        return None

    def _forget_full(self, now: float) -> None:
        while self._accounts:
            host, account = next(iter(self._accounts.items()))
            if not account.bucket.full(now):
                return
            del self._accounts[host]
