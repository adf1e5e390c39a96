"""What the bridge reads from IRC and writes to it, as text.

A line from IRC is data: formatting codes and control characters are
stripped before it reaches the worker (the compiler quotes it anyway). A
reply goes to IRC as lines that fit the protocol: split at its newlines, cut
to the server's byte limit on a word boundary where there is one and never
inside a UTF-8 sequence, with no CR, LF, NUL or other control character,
and no more than ``max_lines`` of them.
"""

from __future__ import annotations

import re

# RFC 1459/2812: a message is at most 512 bytes, CR LF included.
IRC_LINE_BYTES = 512
# mIRC formatting: bold, colour (with its digits), hex colour, reset,
# monospace, italic, strikethrough, underline, reverse.
_FORMATTING = re.compile(
    r"\x03(?:\d{1,2}(?:,\d{1,2})?)?|\x04(?:[0-9a-fA-F]{6}(?:,[0-9a-fA-F]{6})?)?|[\x02\x0f\x11\x1d\x1e\x1f\x16]"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# What a line from IRC loses: every C0 control but tab (a bare CR or LF within
# a line too: only CR LF ends one), DEL and the C1 controls (CSI, NEL, …).
_INBOUND_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """*text* from IRC without formatting codes or control characters."""
    return _INBOUND_CONTROLS.sub("", _FORMATTING.sub("", text)).strip()


def addressed(text: str, nick: str) -> bool:
    """Whether *text* speaks to *nick*: ``nick: …``, ``nick, …`` or ``@nick``
    anywhere (IRC compares nicks without case)."""
    lowered, name = text.lower(), nick.lower()
    if lowered.startswith((f"{name}:", f"{name},")):
        return True
    return re.search(rf"(?<![\w@])@{re.escape(name)}(?![\w\-\[\]\\`^{{}}|])", lowered) is not None


def reply_lines(text: str, budget: int, max_lines: int, more: str) -> list[str]:
    """*text* as IRC lines of at most *budget* bytes each; past *max_lines*
    the rest is left out and the last line is *more* (where to read it)."""
    lines: list[str] = []
    for paragraph in re.split(r"\r\n|\r|\n|\u2028|\u2029|\x85", text):
        flat = _CONTROLS.sub(" ", paragraph).replace("\t", " ").rstrip()
        if flat.strip():
            lines.extend(_fit(flat, budget))
    if len(lines) > max_lines:
        lines = [*lines[: max_lines - 1], *_fit(more, budget)[:1]]
    return lines


def _fit(line: str, budget: int) -> list[str]:
    """*line* in pieces of at most *budget* UTF-8 bytes, none empty, cut at
    the last space that fits, else between characters."""
    pieces = []
    while len(line.encode()) > budget:
        cut = _prefix_chars(line, budget)
        space = line.rfind(" ", 0, cut + 1)
        if space > 0:
            cut = space
        # Whitespace alone (an indentation longer than a line) is no line.
        if piece := line[:cut].rstrip():
            pieces.append(piece)
        line = line[cut:].lstrip()
    if line:
        pieces.append(line)
    return pieces


def _prefix_chars(line: str, budget: int) -> int:
    """How many characters of *line* fit in *budget* bytes (at least one)."""
    used = 0
    for at, char in enumerate(line):
        used += len(char.encode())
        if used > budget:
            return max(at, 1)
    return len(line)
