"""Real runs for the inspector's tests: a session whose every input is
hostile text, a tool step, a cache miss the compiler caused, and a failed
compilation, all written by real daemons on the provider simulator."""

from __future__ import annotations

import json
from pathlib import Path

from engines_org import PRICES
from harness import daemon_in_process
from orgs import simulated_engine, write_org
from simulator import Calls, Reply, Simulator

from rosterd.client import RpcError

__all__ = ("HOSTILE", "Made", "make_runs")

# Markup, script and text that reads differently than it is, as others may write it.
HOSTILE = (
    "<script>window.pwned = 1</script>",
    '<img src=x onerror="window.pwned = 1">',
    '<a href="javascript:window.pwned = 1">click</a>',
    "</textarea></pre></details><script>window.pwned = 1</script>",
    '<svg onload="window.pwned = 1"><script>window.pwned = 1</script></svg>',
    "<style>body { display: none }</style>",
    "\u202egnp.exe\u202c and a line\u2028separator",
    "{{ 7 * 7 }} {% raw %}",
)


class Made:
    """The runs made, by what they show."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.session = ""
        self.changed = ""
        self.failed = ""


async def make_runs(root: Path) -> Made:
    """Three runs of w0 in c0 (a session with hostile text and a tool step; a
    later session after identity.md changed; a direct run over budget)."""
    made = Made(root / "state")
    async with Simulator() as sim:
        write_org(root / "org", engine=simulated_engine(sim, "anthropic"), sections=PRICES)
        async with (
            daemon_in_process(root / "org", made.state) as daemon,
            await daemon.client() as client,
        ):
            for text in HOSTILE:
                await client.memory_add("w0", f"note: {text}", channel="c0")
                await client.channel_post("c0", "mallory", f"post: {text}")
            opened = await client.session_open("w0", "c0")
            made.session = opened.session
            sim.script(Reply("reply: " + " ".join(HOSTILE)))
            await client.session_send(opened.session, "message: " + HOSTILE[0], "mallory")
            remember = json.dumps({"text": "tool: " + HOSTILE[1]})
            sim.script(Calls((("remember", remember),), text=HOSTILE[2]))
            await client.session_send(opened.session, "remember this, please")
            await client.session_close(opened.session)
        identity = root / "org" / "workers" / "w0" / "identity.md"
        identity.write_text(identity.read_text() + "\nNow also: " + HOSTILE[4] + "\n")
        async with (
            daemon_in_process(root / "org", made.state) as daemon,
            await daemon.client() as client,
        ):
            opened = await client.session_open("w0", "c0")
            made.changed = opened.session
            await client.session_send(opened.session, "hello again")
            try:
                await client.run_direct("w0", "x" * 30_000)
            except RpcError as exc:
                assert exc.code == 1001
                made.failed = exc.data["run"]
    return made
