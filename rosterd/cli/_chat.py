"""``roster chat``: an interactive frontend with streamed replies.

Replies stream to stdout; the prompt, the session line and the one-line
compile summary of each turn go to stderr, so stdout holds only what the
worker said. A failed turn (over budget, engine down) is reported and the
chat goes on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import anyio.to_thread

from .._errors import RosterError
from ..client import RosterClient, RpcError
from ..protocol import COMPILE_FAILED, Delta, Wait
from ._terminal import raw
from ._views import summary_line


async def connect_waiting(path: Path, wait_s: float) -> RosterClient:
    """Connect, retrying for up to *wait_s* seconds while the daemon starts."""
    with anyio.move_on_after(wait_s):
        while True:
            try:
                return await RosterClient.connect(path)
            except RosterError:
                await anyio.sleep(0.1)
    return await RosterClient.connect(path)


async def stream_deltas(delta: Delta) -> None:
    """Write each ``turn.delta`` to stdout as it arrives."""
    sys.stdout.write(delta.text)
    sys.stdout.flush()


# Back to the start of the line, and clear it: the status line's own
# control sequence, so it goes to the terminal as it is.
_CLEAR_LINE = "\r\x1b[2K"

_WAITING = {
    "queued": "queued behind other calls to the engine",
    "rate_limited": "rate limited by the provider",
    "overloaded": "the provider is overloaded",
    "fallback": "trying a fallback engine",
}


class _StatusLine:
    """Why the turn waits, on one line of stderr that the reply replaces,
    rather than a message of its own."""

    def __init__(self) -> None:
        self._shown = False
        self._terminal = sys.stderr.isatty()

    async def waiting(self, wait: Wait) -> None:
        text = f"[{_WAITING[wait.reason]}"
        text += f", retrying in {wait.retry_in_s:.0f}s]" if wait.retry_in_s else "]"
        if self._terminal:
            raw(sys.stderr).write(_CLEAR_LINE)
            sys.stderr.write(text)
        else:
            sys.stderr.write(f"{text}\n")
        sys.stderr.flush()
        self._shown = True

    async def delta(self, delta: Delta) -> None:
        if self._shown and self._terminal:
            raw(sys.stderr).write(_CLEAR_LINE)
            sys.stderr.flush()
        self._shown = False
        await stream_deltas(delta)


def describe_rpc_error(exc: RpcError) -> str:
    """The daemon's message, plus where to look when a compilation failed."""
    data = exc.data if isinstance(exc.data, dict) else {}
    run = data.get("run")
    if exc.code == COMPILE_FAILED and isinstance(run, str):
        return f"{exc} (run {run}; see 'roster server runs show {run}')"
    return str(exc)


async def chat(path: Path, worker: str, channel: str, sender: str, wait_s: float) -> int:
    async with await connect_waiting(path, wait_s) as client:
        opened = await client.session_open(worker, channel)
        resumed = f", resumed after turn {opened.turns}" if opened.turns else ""
        print(
            f"session {opened.session} with {worker} in #{channel}{resumed}. Ctrl-D to leave.",
            file=sys.stderr,
        )
        session = opened.session
        while True:
            sys.stderr.write(f"{sender}> ")
            sys.stderr.flush()
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                print(file=sys.stderr)
                return 0
            text = line.rstrip("\n")
            if not text.strip():
                continue
            try:
                status = _StatusLine()
                turn = await client.session_send(
                    session, text, sender, status.delta, status.waiting
                )
            except RpcError as exc:
                print(f"\nroster: {describe_rpc_error(exc)}", file=sys.stderr)
                continue
            print()
            if turn.rolled_from is not None:
                session = turn.run
                print(f"session {turn.rolled_from} rolled over to {session}", file=sys.stderr)
            print(summary_line(turn), file=sys.stderr)
