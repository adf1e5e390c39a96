"""What ``roster`` writes to a terminal is shown, never obeyed.

Much of what roster prints was written by a model or a peer: replies,
transcripts, compiled prompts that hold tool results, memory notes, gate
summaries, messages, errors quoting a provider. A terminal obeys the
control characters in such text: an ESC sequence moves the cursor,
recolours or clears what was shown, OSC 52 writes the clipboard, OSC 8
makes a link, CR goes back over a line, the C1 CSI (U+009B) does what
``ESC [`` does, and the bidi controls reorder what the reader sees. So
while ``roster`` runs, ``shown_on_terminal`` puts a stream in place of
stdout and of stderr, each one that is a terminal, which shows every such
character instead of writing it:

- a C0 control other than newline and tab, in caret notation, as ``cat -v``
  shows it: ESC is ``^[``, CR ``^M``, BEL ``^G``, NUL ``^@``;
- DEL, the C1 controls (U+0080 to U+009F) and the bidi embeddings,
  overrides and isolates (U+202A to U+202E, U+2066 to U+2069), as JSON
  escapes them: ``\\u007f``, ``\\u009b``, ``\\u202e``. JSON escapes every C0
  control itself, and these stand only inside its strings, so ``--json``
  on a terminal is still the same document.

Output to a pipe or a file is not touched: it is the exact bytes, as
``runs context`` promises. roster's own control sequences (the chat's
status line) go to ``raw(stream)``.
"""

from __future__ import annotations

import codecs
import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

_CARET = {code: f"^{chr(code + 0x40)}" for code in range(0x20) if chr(code) not in "\n\t"}
_ESCAPED = (0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_VISIBLE = _CARET | {code: f"\\u{code:04x}" for code in _ESCAPED}


class _Visible(io.BufferedIOBase):
    """The binary side of a terminal's stand-in: what is written to it,
    text or bytes (``runs context`` writes bytes), reaches the terminal's
    own text stream shown, in the order it was written."""

    def __init__(self, terminal: TextIO) -> None:
        self._terminal = terminal
        # A character cut between two writes is held until its end comes;
        # bytes that are no text (a lone 0x9b is CSI to some terminals) show as U+FFFD.
        self._decoder = codecs.getincrementaldecoder(terminal.encoding)("replace")

    def __repr__(self) -> str:
        return f"_Visible({self._terminal!r})"

    @property
    def name(self) -> str:
        return self._terminal.name

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer, /) -> int:
        view = memoryview(data)
        self._terminal.write(self._decoder.decode(view).translate(_VISIBLE))
        return view.nbytes

    def flush(self) -> None:
        self._terminal.flush()

    def isatty(self) -> bool:
        return self._terminal.isatty()

    def fileno(self) -> int:
        return self._terminal.fileno()


class _Shown(io.TextIOWrapper):
    """A terminal's stand-in as ``sys.stdout`` or ``sys.stderr``: a text
    stream like the one it replaces, over a binary side that shows controls.
    Text is shown there too, so that what a command writes to ``.buffer``
    takes the same one path as what it prints."""

    def __init__(self, terminal: TextIO) -> None:
        super().__init__(
            _Visible(terminal),
            encoding=terminal.encoding,
            errors=terminal.errors,
            newline="\n",
            # Nothing waits here, so a write to the terminal itself
            # (``raw``) never overtakes one made through the stand-in.
            write_through=True,
        )
        self.terminal = terminal


def raw(stream: TextIO) -> TextIO:
    """Where roster writes control sequences of its own: the terminal behind
    *stream* if it is a stand-in, else *stream*."""
    return stream.terminal if isinstance(stream, _Shown) else stream


def _shown(stream: TextIO | None) -> TextIO | None:
    # None when roster runs with the descriptor closed (``>&-``).
    return _Shown(stream) if stream is not None and stream.isatty() else stream


@contextmanager
def shown_on_terminal() -> Iterator[None]:
    """Until the block ends, stdout and stderr each show controls if they are a terminal."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _shown(sys.stdout), _shown(sys.stderr)
    yield
    # Not in a ``finally``: the traceback of an error that escaped goes out through the stand-ins.
    sys.stdout, sys.stderr = saved
