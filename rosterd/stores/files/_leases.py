"""Leases in memory: the daemon holding the state directory is the only host."""

from __future__ import annotations


class Leases:
    """Who holds what until when; an expired lease goes to the next taker."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, float]] = {}

    def __repr__(self) -> str:
        return f"Leases({len(self._held)} held)"

    def take(self, key: str, holder: str, now: float, until: float) -> str | None:
        """``None`` when *holder* now has *key* until *until*, else who does."""
        current = self._held.get(key)
        if current is not None and current[0] != holder and current[1] > now:
            return current[0]
        self._held[key] = (holder, until)
        return None

    def renew(self, key: str, holder: str, until: float) -> bool:
        """Extend *holder*'s lease; ``False`` if another took it meanwhile."""
        current = self._held.get(key)
        if current is None or current[0] != holder:
            return False
        self._held[key] = (holder, until)
        return True

    def free(self, key: str, now: float) -> bool:
        current = self._held.get(key)
        return current is None or current[1] <= now

    def release(self, key: str, holder: str) -> None:
        if key in self._held and self._held[key][0] == holder:
            del self._held[key]
