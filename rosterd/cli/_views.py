"""The one-line compile summary a frontend prints after each turn."""

from __future__ import annotations

from ..protocol import TurnResult


def summary_line(turn: TurnResult) -> str:
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
        if usage is not None
        else "tokens not reported"
    )
    budget = f"{turn.used}/{turn.total} chars"
    return f"[{turn.run} turn {turn.turn}: {' · '.join(parts)} · {budget} · {tokens}]"
