"""The embedded offline engine: deterministic, no key, no network.

It answers with a short account of what it received, so the whole pipeline
(compile, trace, transcript, streaming) runs on a fresh machine.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence

import msgspec

from ..protocol import ChatMessage, Usage
from ._base import DeltaSink, EngineReply, EngineRequest, WaitSink

_QUOTE_CHARS = 200
# Transcripts whose size the engine keeps between requests.
_TRANSCRIPTS = 64


class _Line(msgspec.Struct):
    block: str
    text: str = ""


_decode_line = msgspec.json.Decoder(_Line).decode


class EchoEngine:
    kind = "echo"
    # Nothing is cached: no cache check can measure it.
    measures_cache = False

    def __init__(self) -> None:
        self._sizes = _TranscriptSizes()

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
        prompt_chars = len(request.system.text) + self._sizes.chars(request.messages)
        usage = Usage(input_tokens=(prompt_chars + 3) // 4, output_tokens=(len(text) + 3) // 4)
        return EngineReply(text=text, usage=usage)

    async def aclose(self) -> None:
        pass


class _TranscriptSizes:
    """The characters of the transcripts the engine was sent, so that a
    request costs what was appended since the last, not the whole
    conversation: a host passes its live, append-only transcript (see
    ``EngineRequest``), and a real provider's usage counts the whole prompt.

    Kept per list object, with its message count and last message; a list
    that is not the one kept (another list at a reused address, or one cut
    back) no longer holds that message there, and is summed whole. The last
    message is held, so no other object can take its address meanwhile.
    """

    def __init__(self) -> None:
        self._kept: OrderedDict[int, tuple[int, int, ChatMessage]] = OrderedDict()

    def chars(self, messages: Sequence[ChatMessage]) -> int:
        count, chars = 0, 0
        kept = self._kept.pop(id(messages), None)
        if kept is not None:
            known, known_chars, last = kept
            if 0 < known <= len(messages) and messages[known - 1] is last:
                count, chars = known, known_chars
        chars += sum(len(m.content) for m in messages[count:])
        if messages:
            self._kept[id(messages)] = (len(messages), chars, messages[-1])
            if len(self._kept) > _TRANSCRIPTS:
                self._kept.popitem(last=False)
        return chars


def _pieces(text: str, size: int = 48) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
