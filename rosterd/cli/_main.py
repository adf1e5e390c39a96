"""``roster``: the command line. Exit codes: 0 ok, 1 failure, 2 usage."""

from __future__ import annotations

from collections.abc import Sequence

from ._parser import build_parser
from ._terminal import shown_on_terminal


def main(argv: Sequence[str] | None = None) -> int:
    # Every command, and argparse's own messages, write through it: none can forget.
    with shown_on_terminal():
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, or a usage error already printed
            return exc.code if isinstance(exc.code, int) else 2
        # Only once there is a command to run: --help and usage errors load the parser alone.
        from ._commands import run

        return run(args)
