"""``python -m rosterd.inspect LISTEN``: the inspector a daemon starts for
``[inspect] listen``, in a process of its own.

It reads the state ``ROSTER_STATE`` names, as ``roster server inspect``
does, asks for the token in ``ROSTER_INSPECT_TOKEN`` if it is set, and
serves until its standard input closes: the daemon holds the other end, so
the inspector stops with it, however the daemon ended. Its log lines, and
the one line that says why it could not start, go to standard error, where
the daemon reads them.
"""

from __future__ import annotations

import logging
import os
import sys
from functools import partial

import anyio
import anyio.to_thread

from .._errors import RosterError
from ..protocol import StateLocation, state_location
from ..stores import read_state_runs
from ._serve import serve_inspector


async def _serve_while_the_daemon_lives(
    state: StateLocation, listen: str, token: str | None
) -> None:
    async with anyio.create_task_group() as tg:
        runs = partial(read_state_runs, state)
        await tg.start(partial(serve_inspector, runs, listen, token, embedded=True))
        # Returns at end of file: the daemon closed its end, or died.
        await anyio.to_thread.run_sync(sys.stdin.buffer.read, abandon_on_cancel=True)
        tg.cancel_scope.cancel()


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    (listen,) = sys.argv[1:]
    state = state_location(os.environ["ROSTER_STATE"])
    token = os.environ.get("ROSTER_INSPECT_TOKEN")
    try:
        anyio.run(_serve_while_the_daemon_lives, state, listen, token)
    except BaseExceptionGroup as group:
        # Why it could not start (its address taken, say) is the daemon's
        # error: its one line, not a traceback.
        match group.exceptions:
            case (RosterError() as error,):
                sys.stderr.write(f"{error}\n")
                return 1
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
