"""What a run in one channel sees of items filed per channel or worker-wide."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ("scoped_totals",)


def scoped_totals(
    totals: Mapping[str | None, tuple[int, int]], channel: str | None
) -> tuple[int, int]:
    """Count and characters of the worker-wide items (``None``) and *channel*'s."""
    count, chars = totals.get(None, (0, 0))
    if channel is not None:
        more, more_chars = totals.get(channel, (0, 0))
        count, chars = count + more, chars + more_chars
    return count, chars
