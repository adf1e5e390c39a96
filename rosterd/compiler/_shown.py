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

from ._envelopes import BriefingGate, MemoryEnvelope, render_line
from ._gates import GateView
from ._inputs import Gate, Shown
from ._memory import MemoryView
from ._system import sha256_text
from ._trace import AlreadyShown

__all__ = (
    "Held",
    "ShownKind",
    "held_memory",
    "held_open_gates",
    "line_sha256",
    "shown_in",
    "unshown_gates",
)

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
    # Every turn checks every item already shown: the same texts each turn,
    # so this is a cache hit, not a render.
    return line_sha256(render_line(MemoryEnvelope(id=item_id, text=text)))


class Held(msgspec.Struct, frozen=True):
    """Of the items in scope, those the conversation holds: the ordinals to
    leave out of the view's walk, their trace entries and raw characters."""

    ordinals: frozenset[int] = frozenset()
    known: tuple[AlreadyShown, ...] = ()
    raw_chars: int = 0


def held_memory(memory: MemoryView, channel: str | None, shown: Mapping[str, Shown]) -> Held:
    """The notes in scope whose line the conversation already holds.

    Only the notes the ledger names are looked at: the cost follows what the
    session showed, not what the worker ever wrote.
    """
    ordinals: list[int] = []
    known: list[AlreadyShown] = []
    chars = 0
    for ordinal, item, before in memory.with_ids(shown, channel):
        if before.sha256 == _memory_sha256(item.id, item.text):
            ordinals.append(ordinal)
            known.append(AlreadyShown(id=item.id, since=before.turn))
            chars += len(item.text)
    return Held(frozenset(ordinals), tuple(known), chars)


def held_open_gates(gates: GateView, channel: str | None, shown: Mapping[str, Shown]) -> Held:
    """The open gates in scope whose line the conversation already holds."""
    ordinals: list[int] = []
    known: list[AlreadyShown] = []
    chars = 0
    for ordinal, gate, before in gates.open_with_ids(shown, channel):
        if before.sha256 == _open_gate_sha256(gate.id, gate.summary):
            ordinals.append(ordinal)
            known.append(AlreadyShown(id=gate.id, since=before.turn))
            chars += len(gate.summary) + len(gate.note)
    return Held(frozenset(ordinals), tuple(known), chars)


@lru_cache(maxsize=4096)
def _open_gate_sha256(gate_id: str, summary: str) -> str:
    return line_sha256(render_line(BriefingGate(kind="gate", gate=gate_id, summary=summary)))


def unshown_gates(
    gates: Sequence[Gate], lines: Sequence[str], shown: Mapping[str, Shown]
) -> tuple[list[Gate], list[str], tuple[AlreadyShown, ...]]:
    """Of gates and their rendered lines, those not yet sent, and those left out."""
    fresh: list[Gate] = []
    fresh_lines: list[str] = []
    known: list[AlreadyShown] = []
    for gate, line in zip(gates, lines, strict=True):
        before = shown.get(gate.id)
        if before is not None and before.sha256 == line_sha256(line):
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
