"""What every command shares: tables, JSON for scripts, times, text arguments.

Human output goes to stdout, diagnostics to stderr; ``--json`` prints one
JSON document on stdout and nothing else there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias, TypeVar

import msgspec

from ..compiler import iso_time

_ELLIPSIS = "..."

_T = TypeVar("_T")
# A listing's columns: each a header and the cell of an item under it.
Columns: TypeAlias = Sequence[tuple[str, Callable[[_T], object]]]


class UsageError(Exception):
    """A command line that parsed but cannot be used; exits with status 2."""


def emit_json(value: object) -> None:
    data = msgspec.json.format(msgspec.json.encode(value), indent=2)
    sys.stdout.write(data.decode() + "\n")


def read_text(words: Sequence[str], what: str) -> str:
    """The words of a TEXT argument joined by spaces; ``-`` reads stdin."""
    text = sys.stdin.read().removesuffix("\n") if list(words) == ["-"] else " ".join(words)
    if not text.strip():
        raise UsageError(f"the {what} is empty")
    return text


def when(at: float | None) -> str:
    return iso_time(at) if at else "-"


def short(text: str | None, width: int = 60) -> str:
    """One table cell: newlines flattened, long text cut with an ellipsis."""
    if text is None:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - len(_ELLIPSIS)] + _ELLIPSIS


def listing(columns: Columns[_T], items: Iterable[_T], empty: str) -> str:
    """A table of *items*, a row each and a column per ``(header, cell)``
    of *columns*, or the line *empty* when there are none."""
    rows = [[cell(item) for _, cell in columns] for item in items]
    return table([header for header, _ in columns], rows) if rows else empty


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], indent: str = "") -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    body = [list(row) for row in rows]
    cells = [list(headers), *([_cell(c) for c in row] for row in body)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        any(isinstance(row[i], int) for row in body)
        and all(isinstance(row[i], int) or row[i] is None for row in body)
        for i in range(len(headers))
    ]
    lines = []
    for row in cells:
        padded = [
            c.rjust(w) if right else c.ljust(w)
            for c, w, right in zip(row, widths, numeric, strict=True)
        ]
        lines.append((indent + "  ".join(padded)).rstrip())
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return str(value)
