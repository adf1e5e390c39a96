"""JSON envelopes: the only form dynamic text takes inside a prompt.

Each item becomes exactly one line holding one JSON object whose first key is
``block``. JSON escaping turns every newline and quote inside the text into an
escape sequence, so no text can end its line, open another envelope or close
a block early. The few characters that JSON leaves raw but that some readers
treat as line breaks (NEL, LINE and PARAGRAPH SEPARATOR) are escaped too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec


class MemoryEnvelope(msgspec.Struct, frozen=True, tag_field="block", tag="memory"):
    id: str
    text: str


class BriefingContinuation(msgspec.Struct, frozen=True, tag_field="block", tag="briefing"):
    """The gate a continuation run picks up from, or one resolved since the
    session's last turn (``kind="resolved"``)."""

    kind: Literal["continuation", "resolved"]
    gate: str
    summary: str
    outcome: str
    note: str


class BriefingGate(msgspec.Struct, frozen=True, tag_field="block", tag="briefing"):
    kind: Literal["gate"]
    gate: str
    summary: str


class BriefingOmitted(msgspec.Struct, frozen=True, tag_field="block", tag="briefing"):
    kind: Literal["omitted"]
    gates: int


class HistoryEnvelope(msgspec.Struct, frozen=True, tag_field="block", tag="history"):
    sender: str = msgspec.field(name="from")
    text: str


class MessageEnvelope(msgspec.Struct, frozen=True, tag_field="block", tag="message"):
    sender: str = msgspec.field(name="from")
    at: str
    text: str


class MessagesOmitted(msgspec.Struct, frozen=True, tag_field="block", tag="message"):
    """Leads the messages posted since the last turn when older ones were dropped."""

    omitted: int


class TaskEnvelope(msgspec.Struct, frozen=True, tag_field="block", tag="task"):
    run: str
    at: str
    text: str


class ToolEnvelope(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="block", tag="tool"):
    """One tool result, quoted data; ``cut`` counts characters of text left out."""

    call: str
    connection: str
    status: str
    text: str
    cut: int = 0


Envelope = (
    MemoryEnvelope
    | BriefingContinuation
    | BriefingGate
    | BriefingOmitted
    | HistoryEnvelope
    | MessageEnvelope
    | MessagesOmitted
    | TaskEnvelope
    | ToolEnvelope
)

_encoder = msgspec.json.Encoder()
_LINE_BREAKS = (("\x85", "\\u0085"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def render_line(envelope: Envelope) -> str:
    """The envelope as one line of text, newline included."""
    return render_lines((envelope,))[0]


def render_lines(envelopes: Sequence[Envelope]) -> list[str]:
    """Each envelope as one line, newline included; the same as ``render_line``
    of each, in one encoder call (the compiler's hot path)."""
    if not envelopes:
        return []
    try:
        data = _encoder.encode_lines(envelopes)
    except UnicodeEncodeError:
        # Repairing an envelope without lone surrogates leaves it unchanged,
        # so repairing the whole batch renders each line as it would alone.
        data = _encoder.encode_lines([_without_lone_surrogates(e) for e in envelopes])
    # JSON escapes every other line break, so the only ones left are ours.
    return escape_line_breaks(data.decode("utf-8")).splitlines(keepends=True)


def escape_line_breaks(json_text: str) -> str:
    """*json_text* with the line breaks JSON leaves raw (NEL, LS, PS) escaped."""
    # ASCII text holds none of them; the flag is free to check.
    if not json_text.isascii():
        for raw, escaped in _LINE_BREAKS:
            # These characters can only occur inside JSON strings, where the
            # escape means the same character.
            if raw in json_text:
                json_text = json_text.replace(raw, escaped)
    return json_text


def _without_lone_surrogates(envelope: Envelope) -> Envelope:
    # A lone surrogate cannot be encoded as UTF-8; it becomes U+FFFD, the
    # same way every time, so output stays deterministic.
    changes = {
        field: encodable(value)
        for field in envelope.__struct_fields__
        if isinstance(value := getattr(envelope, field), str)
    }
    return msgspec.structs.replace(envelope, **changes)


def encodable(text: str) -> str:
    """*text* with each lone surrogate, which UTF-8 cannot encode, as U+FFFD."""
    if text.isascii():
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


_message = msgspec.json.Decoder(MessageEnvelope)


def message_texts(content: str) -> list[str]:
    """The texts of the message envelopes in *content*, a compiled input,
    in order (a count of omitted messages is not one)."""
    texts = []
    for line in content.splitlines():
        if line.startswith('{"block":"message"'):
            try:
                texts.append(_message.decode(line).text)
            except msgspec.ValidationError:
                continue
    return texts
