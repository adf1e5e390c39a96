"""The contract every registered engine keeps, run over each entry of
``ENGINES`` with the network replaced by ``httpx.MockTransport``: it streams
the reply it returns, it survives a 429 with ``retry-after``, its errors
never carry the key, and a 400 fails at once with a clear ``EngineError``.
A new kind of engine is added to ``PROVIDER_REPLIES`` here, or the first
test fails."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import msgspec
import pytest
from harness import REPO

from rosterd import EngineError
from rosterd.compiler import RunMeta, compile_system
from rosterd.engines import ENGINES, Engine, EngineReply, EngineRequest, open_engine
from rosterd.org import EngineConfig, EngineKind, Surface, load_org
from rosterd.protocol import ChatMessage, WaitReason

pytestmark = pytest.mark.anyio

SECRET = "sk-contract-secret-4242"
REPLY = ("Hello", " there")


def _openai_stream() -> bytes:
    chunks: list[dict[str, object]] = [
        {"choices": [{"index": 0, "delta": {"content": piece}}]} for piece in REPLY
    ]
    chunks.append(
        {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 2},
        }
    )
    body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks)
    return (body + "data: [DONE]\n\n").encode()


def _anthropic_stream() -> bytes:
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "usage": {"input_tokens": 12, "output_tokens": 0},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        *(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": piece},
                },
            )
            for piece in REPLY
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 2},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


# What each provider kind streams back; echo needs no network.
PROVIDER_REPLIES: dict[str, Callable[[], bytes] | None] = {
    "echo": None,
    "openai": _openai_stream,
    "anthropic": _anthropic_stream,
}


def test_every_registered_kind_is_configurable_and_in_this_suite() -> None:
    assert set(ENGINES) == set(PROVIDER_REPLIES)
    assert set(ENGINES) == set(EngineKind.__args__)  # type: ignore[attr-defined]


def _request() -> EngineRequest:
    org = load_org(REPO / "examples" / "org")
    meta = RunMeta(run="d-1", turn=1, now=1_800_000_000.0)
    system = compile_system(org, org.scope(Surface.DIRECT, "ada", None), meta)
    return EngineRequest(system=system, messages=[ChatMessage(role="user", content="hello")])


def _engine(kind: str, handler: Callable[[httpx.Request], httpx.Response]) -> Engine:
    config = EngineConfig(
        kind=kind,  # type: ignore[arg-type]
        model="contract-model",
        api_key_env="PROVIDER_KEY",
        max_retries=2,
    )
    return open_engine(config, {"PROVIDER_KEY": SECRET}, transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("kind", sorted(ENGINES))
async def test_the_reply_is_streamed_and_returned_whole(kind: str) -> None:
    stream = PROVIDER_REPLIES[kind]
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        assert stream is not None
        return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})

    engine = _engine(kind, handler)
    pieces: list[str] = []

    async def on_delta(text: str) -> None:
        pieces.append(text)

    try:
        reply = await engine.complete(_request(), on_delta)
    finally:
        await engine.aclose()
    assert "".join(pieces) == reply.text
    assert engine.measures_cache == (stream is not None)
    if stream is not None:
        assert reply.text == "".join(REPLY)
        assert len(sent) == 1 and sent[0].method == "POST"
        assert json.loads(sent[0].content)["model"] == "contract-model"


HTTP_KINDS = sorted(k for k, stream in PROVIDER_REPLIES.items() if stream)


def _stream(kind: str) -> httpx.Response:
    stream = PROVIDER_REPLIES[kind]
    assert stream is not None
    return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})


async def _complete(
    kind: str, answers: list[httpx.Response], request: EngineRequest, waits: list[WaitReason]
) -> EngineReply:
    """*request* to an engine of *kind* whose provider gives *answers*, one a
    call (those left were never asked for); *waits* hears each wait."""

    def handler(request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    async def on_wait(reason: WaitReason, retry_in_s: float | None) -> None:
        waits.append(reason)

    async def ignore(text: str) -> None:
        pass

    engine = _engine(kind, handler)
    try:
        return await engine.complete(request, ignore, on_wait)
    finally:
        await engine.aclose()


def _429(retry_after: str) -> httpx.Response:
    headers = {"retry-after": retry_after}
    return httpx.Response(429, headers=headers, json={"error": {"message": "slow down"}})


@pytest.mark.parametrize("kind", HTTP_KINDS)
async def test_a_429_with_retry_after_is_retried(kind: str) -> None:
    answers, waits = [_429("0"), _stream(kind)], list[WaitReason]()
    reply = await _complete(kind, answers, _request(), waits)
    assert reply.text == "".join(REPLY)
    assert answers == [] and waits == ["rate_limited"]


@pytest.mark.parametrize("kind", HTTP_KINDS)
async def test_an_impatient_call_does_not_wait_out_a_retry_after(kind: str) -> None:
    answers, waits = [_429("3600"), _stream(kind)], list[WaitReason]()
    impatient = msgspec.structs.replace(_request(), patient=False)
    with pytest.raises(EngineError) as failed:
        await _complete(kind, answers, impatient, waits)
    assert len(answers) == 1 and waits == []
    assert failed.value.retryable and failed.value.retry_after == 3600


@pytest.mark.parametrize("kind", HTTP_KINDS)
async def test_a_refusal_fails_at_once_without_the_key(kind: str) -> None:
    # A provider that echoes the key it was sent, as some do.
    refusal = httpx.Response(400, json={"error": {"message": f"bad request for key {SECRET}"}})
    answers, waits = [refusal, _stream(kind)], list[WaitReason]()
    with pytest.raises(EngineError) as failed:
        await _complete(kind, answers, _request(), waits)
    assert len(answers) == 1 and waits == []
    assert SECRET not in str(failed.value)
    assert "400" in str(failed.value)


def test_the_example_org_names_a_registered_kind() -> None:
    assert load_org(REPO / "examples" / "org").engine.kind in ENGINES
