"""What a session's conversation already holds, left out of the next turn.

Every memory item and gate a turn sends is one envelope line. A session keeps,
per id, the sha256 of that line and the turn that sent it (``ShownItems``); a
later turn leaves the item out while it would render the same line again. An
item whose text changed, or a gate since resolved, renders a different line
and is sent again. ``shown_in`` reads those lines back out of an input the
compiler produced, so a session can rebuild what it showed from its
transcript.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Literal

import msgspec

from ._envelopes import memory_line
from ._inputs import Gate, MemoryItem, Shown
from ._system import sha256_text
from ._trace import AlreadyShown

__all__ = ("ShownKind", "line_sha256", "shown_in", "unshown_gates", "unshown_memory")

ShownKind = Literal["memory", "gate"]

# Envelopes render their tag first, so a line's block is known from its start.
_MEMORY = '{"block":"memory",'
_BRIEFING = '{"block":"briefing",'
# Only these briefing kinds stand for one gate; "omitted" counts gates not sent.
_GATE_KINDS = frozenset({"gate", "resolved"})


class _MemoryLine(msgspec.Struct):
    id: str


class _BriefingLine(msgspec.Struct):
    kind: str
    gate: str | None = None


_memory_line = msgspec.json.Decoder(_MemoryLine)
_briefing_line = msgspec.json.Decoder(_BriefingLine)


def line_sha256(line: str) -> str:
    return sha256_text(line)


@lru_cache(maxsize=4096)
def _memory_sha256(item_id: str, text: str) -> str:
    # Every turn checks every item already shown: the store hands over the
    # same objects each turn, so this is a cache hit, not a render.
    return line_sha256(memory_line(item_id, text))


@lru_cache(maxsize=4096)
def _gate_sha256(line: str) -> str:
    # The lines are the compiler's cached ones, the same objects every turn.
    return line_sha256(line)


def unshown_memory(
    items: Sequence[MemoryItem], shown: Mapping[str, Shown]
) -> tuple[list[MemoryItem], tuple[AlreadyShown, ...]]:
    """The items the conversation does not hold yet, and those left out."""
    if not shown:
        return list(items), ()
    fresh: list[MemoryItem] = []
    known: list[AlreadyShown] = []
    for item in items:
        before = shown.get(item.id)
        if before is not None and before.sha256 == _memory_sha256(item.id, item.text):
            known.append(AlreadyShown(id=item.id, since=before.turn))
        else:
            fresh.append(item)
    return fresh, tuple(known)


def unshown_gates(
    gates: Sequence[Gate], lines: Sequence[str], shown: Mapping[str, Shown]
) -> tuple[list[Gate], list[str], tuple[AlreadyShown, ...]]:
    """Of gates and their rendered lines, those not yet sent, and those left out."""
    fresh: list[Gate] = []
    fresh_lines: list[str] = []
    known: list[AlreadyShown] = []
    for gate, line in zip(gates, lines, strict=True):
        before = shown.get(gate.id)
        if before is not None and before.sha256 == _gate_sha256(line):
            known.append(AlreadyShown(id=gate.id, since=before.turn))
        else:
            fresh.append(gate)
            fresh_lines.append(line)
    return fresh, fresh_lines, tuple(known)


def shown_in(input_text: str) -> Iterator[tuple[ShownKind, str, str]]:
    """The memory items and gates an input sent: kind, id, line sha256."""
    for line in input_text.splitlines(keepends=True):
        if line.startswith(_MEMORY):
            yield "memory", _memory_line.decode(line).id, line_sha256(line)
        elif line.startswith(_BRIEFING):
            briefing = _briefing_line.decode(line)
            if briefing.kind in _GATE_KINDS and briefing.gate is not None:
                yield "gate", briefing.gate, line_sha256(line)
