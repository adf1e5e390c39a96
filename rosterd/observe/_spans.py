"""What the daemon hands its span exporter: the one shape both sides read."""

from __future__ import annotations

import msgspec

# A span's attributes as a turn notes them, and as the exporter reads them
# back: msgspec decodes a JSON array into the tuple the SDK takes.
Attributes = dict[str, str | int | bool | tuple[str, ...]]


class SpanRecord(msgspec.Struct, array_like=True, frozen=True):
    """One finished span as the daemon hands it to the exporter: the first
    of a trace is its root, the others its children."""

    name: str
    kind: int
    start: int
    end: int
    error: str | None
    attributes: Attributes
