"""A minimal rosterd frontend: a chat room on stdin, a worker's replies on stdout.

Each input line is a channel message, ``name: text`` (a line without a name
is from ``--from``). Every message is one turn of the worker's warm session
in the channel; its reply streams to stdout as it arrives. Run it with a
daemon serving the org, e.g.::

    printf 'bob: is 1.4 ready?\\nalice: the build is green\\n' |
        python examples/bridge.py --socket .state/rosterd.sock --worker ada --channel general

It uses only the public client, ``rosterd.client``, and the protocol's
types, ``rosterd.protocol``; see docs/frontend.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

from rosterd import RosterError
from rosterd.client import RosterClient, RpcError
from rosterd.protocol import SESSION_ERROR, Delta, TurnResult


def parse_line(line: str, default_sender: str) -> tuple[str, str]:
    """``"bob: hi"`` is ``("bob", "hi")``; a line without a name is the default sender's."""
    name, sep, text = line.partition(":")
    name = name.strip()
    if sep and name and " " not in name:
        return name, text.strip()
    return default_sender, line.strip()


class Room:
    """One worker's warm session in one channel, reopened when it has ended."""

    def __init__(self, client: RosterClient, worker: str, channel: str) -> None:
        self.client = client
        self.worker = worker
        self.channel = channel
        self.session = ""

    async def open(self) -> None:
        opened = await self.client.session_open(self.worker, self.channel)
        self.session = opened.session
        print(f"# session {self.session} ({self.worker} in #{self.channel})", file=sys.stderr)

    async def say(self, sender: str, text: str) -> TurnResult:
        """One turn; the reply streams to stdout as ``turn.delta`` notifications."""
        try:
            return await self._send(sender, text)
        except RpcError as exc:
            if exc.code != SESSION_ERROR:
                raise
            # Idle expiry, or another frontend closed it: nothing of this turn
            # was recorded, so it is sent again to a fresh session.
            await self.open()
            return await self._send(sender, text)

    async def _send(self, sender: str, text: str) -> TurnResult:
        result = await self.client.session_send(self.session, text, sender, on_delta=_show)
        if result.rolled_from is not None:
            # The conversation grew past its bound: a new session answered.
            # The old id would still reach it; the new one is the truth.
            self.session = result.run
            print(f"# session {result.rolled_from} rolled over to {self.session}", file=sys.stderr)
        return result


async def _show(delta: Delta) -> None:
    sys.stdout.write(delta.text)
    sys.stdout.flush()


async def bridge(socket: Path, worker: str, channel: str, default_sender: str) -> int:
    failures = 0
    async with await RosterClient.connect(socket) as client:
        room = Room(client, worker, channel)
        await room.open()
        async for line in anyio.wrap_file(sys.stdin):
            if not line.strip():
                continue
            sender, text = parse_line(line, default_sender)
            sys.stdout.write(f"{worker} (to {sender}): ")
            try:
                result = await room.say(sender, text)
            except RpcError as exc:
                # Over budget (1001), the provider failed (1002), the engine is
                # misconfigured (1005): the session is intact, the room goes on.
                # On 1010 the daemon is stopping: the next line finds it gone.
                print(f"\n# turn failed: {exc} (code {exc.code})", file=sys.stderr)
                failures += 1
                continue
            print()
            print(f"# run {result.run} turn {result.turn}", file=sys.stderr)
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", type=Path, default=Path(".state/rosterd.sock"))
    parser.add_argument("--worker", default="ada")
    parser.add_argument("--channel", default="general")
    parser.add_argument("--from", dest="sender", default="operator")
    args = parser.parse_args()
    try:
        return anyio.run(bridge, args.socket, args.worker, args.channel, args.sender)
    except RpcError as exc:
        print(f"bridge: {exc} (code {exc.code})", file=sys.stderr)
        return 1
    except RosterError as exc:  # daemon not running, connection closed
        print(f"bridge: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
