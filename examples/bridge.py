"""A minimal rosterd frontend: a chat room on stdin, a worker's replies on stdout.

Each input line is a channel message, ``name: text`` (a line without a name
is from ``--from``). Every message is one turn of the worker's warm session
in the channel; its reply streams to stdout as it arrives. Run it with a
daemon serving the org, e.g.::

    printf 'bob: is 1.4 ready?\\nalice: the build is green\\n' |
        python examples/bridge.py --socket .state/rosterd.sock --worker ada --channel general

It uses only the public client, ``rosterd.client``; see docs/frontend.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

from rosterd import RosterError
from rosterd.client import RosterClient, RpcError


def parse_line(line: str, default_sender: str) -> tuple[str, str]:
    """``"bob: hi"`` is ``("bob", "hi")``; a line without a name is the default sender's."""
    name, sep, text = line.partition(":")
    name = name.strip()
    if sep and name and " " not in name:
        return name, text.strip()
    return default_sender, line.strip()


async def bridge(socket: Path, worker: str, channel: str, default_sender: str) -> int:
    async with await RosterClient.connect(socket) as client:
        opened = await client.call("session.open", {"worker": worker, "channel": channel})
        session = opened["session"]
        print(f"# session {session} ({worker} in #{channel})", file=sys.stderr)

        async def show(method: str, params: Any) -> None:
            if method == "turn.delta":
                sys.stdout.write(params["text"])
                sys.stdout.flush()

        failures = 0
        for line in sys.stdin:
            if not line.strip():
                continue
            sender, text = parse_line(line, default_sender)
            sys.stdout.write(f"{worker} (to {sender}): ")
            try:
                result = await client.call(
                    "session.send",
                    {"session": session, "from": sender, "text": text},
                    on_notification=show,
                )
            except RpcError as exc:
                # A failed turn (over budget, provider down) is reported and the
                # room goes on; the daemon keeps the message in the transcript.
                print(f"\n# turn failed: {exc} (code {exc.code})", file=sys.stderr)
                failures += 1
                continue
            print()
            print(f"# run {result['run']} turn {result['turn']}", file=sys.stderr)
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
