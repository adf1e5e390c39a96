"""Typed views of the daemon's replies, and the one-line compile summary.

The views list only what the CLI shows and ignore fields they do not know,
so a daemon that adds fields keeps working with an older CLI.
"""

from __future__ import annotations

import msgspec

from ..engines import Usage

__all__ = ("BlockView", "DeltaView", "OpenedView", "StatusView", "TurnView", "summary_line")


class BlockView(msgspec.Struct, frozen=True):
    block: str
    status: str
    chars: int
    items: int = 0
    omitted: int = 0


class TurnView(msgspec.Struct, frozen=True):
    run: str
    turn: int
    text: str
    usage: Usage
    blocks: list[BlockView]
    used: int
    total: int


class OpenedView(msgspec.Struct, frozen=True):
    session: str
    worker: str
    channel: str
    turns: int
    system_chars: int
    route_key: str


class StatusView(msgspec.Struct, frozen=True):
    version: str
    pid: int
    sessions: int
    tasks_running: int
    config_error: str | None
    config_loaded_at: float
    config_generation: int


class DeltaView(msgspec.Struct, frozen=True):
    run: str
    text: str


def summary_line(turn: TurnView) -> str:
    """``[run turn N: identity 812 · ... · 3371/48000 chars · tokens 900 in (0 cached), 40 out]``.

    A block dropped under budget pressure shows how many items it lost.
    """
    parts = [
        f"{b.block} {b.chars}" + (f" (-{b.omitted})" if b.omitted else "")
        for b in turn.blocks
        if b.status != "absent"
    ]
    usage = turn.usage
    tokens = (
        f"tokens {usage.input_tokens} in ({usage.cached_input_tokens} cached), "
        f"{usage.output_tokens} out"
    )
    budget = f"{turn.used}/{turn.total} chars"
    return f"[{turn.run} turn {turn.turn}: {' · '.join(parts)} · {budget} · {tokens}]"
