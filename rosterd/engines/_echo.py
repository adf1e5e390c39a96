"""The embedded offline engine: deterministic, no key, no network.

It answers with a short account of what it received, so the whole pipeline
(compile, trace, transcript, streaming) runs on a fresh machine.
"""

from __future__ import annotations

from collections import Counter

import msgspec

from ..protocol import Usage
from ._base import DeltaSink, EngineReply, EngineRequest, WaitSink

_QUOTE_CHARS = 200


class _Line(msgspec.Struct):
    block: str
    text: str = ""


_decode_line = msgspec.json.Decoder(_Line).decode


class EchoEngine:
    kind = "echo"
    # Nothing is cached: no cache check can measure it.
    measures_cache = False

    def __repr__(self) -> str:
        return "EchoEngine()"

    async def complete(
        self, request: EngineRequest, on_delta: DeltaSink, on_wait: WaitSink | None = None
    ) -> EngineReply:
        latest = request.messages[-1].content if request.messages else ""
        blocks: Counter[str] = Counter()
        said = ""
        for line in latest.splitlines():
            try:
                envelope = _decode_line(line)
            except msgspec.DecodeError:
                blocks["unparsed"] += 1
                continue
            blocks[envelope.block] += 1
            if envelope.block in {"message", "task"}:
                said = envelope.text
        summary = ", ".join(f"{name} x{count}" for name, count in sorted(blocks.items()))
        quoted = said if len(said) <= _QUOTE_CHARS else said[:_QUOTE_CHARS] + "..."
        text = (
            f"[echo] turn {(len(request.messages) + 1) // 2}: system {len(request.system.text)} "
            f"chars, input {len(latest)} chars ({summary or 'empty'}), "
            f"transcript {len(request.messages)} messages. You said: {quoted}"
        )
        for piece in _pieces(text):
            await on_delta(piece)
        prompt_chars = len(request.system.text) + sum(len(m.content) for m in request.messages)
        usage = Usage(input_tokens=(prompt_chars + 3) // 4, output_tokens=(len(text) + 3) // 4)
        return EngineReply(text=text, usage=usage)

    async def aclose(self) -> None:
        pass


def _pieces(text: str, size: int = 48) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
