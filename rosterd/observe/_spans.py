"""What the daemon hands its span exporter: the one shape both sides read."""

from __future__ import annotations

import msgspec


class SpanRecord(msgspec.Struct, array_like=True, frozen=True):
    """One finished span as the daemon hands it to the exporter: the first
    of a trace is its root, the others its children."""

    name: str
    kind: int
    start: int
    end: int
    error: str | None
    attributes: dict[str, str | int | bool | list[str]]
