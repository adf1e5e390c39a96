"""``roster chat``: an interactive frontend with streamed replies."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from .._errors import RosterError
from ..client import RosterClient, RpcError

__all__ = ("chat", "connect_waiting")


async def connect_waiting(path: Path, wait_s: float) -> RosterClient:
    """Connect, retrying for up to *wait_s* seconds while the daemon starts."""
    with anyio.move_on_after(wait_s):
        while True:
            try:
                return await RosterClient.connect(path)
            except RosterError:
                await anyio.sleep(0.1)
    return await RosterClient.connect(path)


def _summary(result: Any) -> str:
    parts = [
        f"{b['block']} {b['chars']}" + (f" (-{b['omitted']})" if b["omitted"] else "")
        for b in result["blocks"]
        if b["status"] != "absent"
    ]
    budget = f"{result['used']}/{result['total']} chars"
    return f"[{result['run']} turn {result['turn']}: {' · '.join(parts)} · {budget}]"


async def chat(path: Path, worker: str, channel: str, sender: str, wait_s: float) -> int:
    async with await connect_waiting(path, wait_s) as client:
        opened = await client.call("session.open", {"worker": worker, "channel": channel})
        session = opened["session"]
        resumed = f", resumed at turn {opened['turns']}" if opened["turns"] else ""
        print(
            f"session {session} with {worker} in #{channel}{resumed}. Ctrl-D to leave.",
            file=sys.stderr,
        )

        async def on_delta(method: str, params: Any) -> None:
            if method == "turn.delta":
                sys.stdout.write(params["text"])
                sys.stdout.flush()

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
                result = await client.call(
                    "session.send", {"session": session, "text": text, "from": sender}, on_delta
                )
            except RpcError as exc:
                print(f"\nroster: {exc}", file=sys.stderr)
                continue
            print()
            print(_summary(result), file=sys.stderr)
