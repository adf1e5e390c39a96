"""Provider failures: retries, timeouts, broken streams, and keys kept secret."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import anyio
import pytest
from engines_org import engine_for, hello, hello_refused
from orgs import write_org
from simulator import (
    Conversation,
    Cut,
    Drop,
    ErrorEvent,
    Hangup,
    Malformed,
    Simulator,
    Stall,
    Status,
)

from rosterd import EngineError
from rosterd.engines import Backoff, Engine
from rosterd.org import EngineKind, Org, load_org

pytestmark = pytest.mark.anyio

KEY = "sk-fault-test-secret-0123456789"


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(api_key=KEY) as simulator:
        yield simulator


@pytest.fixture
def org(tmp_path: Path) -> Org:
    return load_org(write_org(tmp_path, identity_chars=800, purpose_chars=200))


# Two retries at once, and a stall noticed within seconds, unless a test says otherwise.
make_engine = partial(engine_for, api_key=KEY, max_retries=2, timeout_s=10.0)


async def fail(engine: Engine, conversation: Conversation | Org) -> EngineError:
    error = await hello_refused(engine, conversation)
    assert KEY not in str(error)
    return error


async def test_a_429_then_success_is_retried(sim: Simulator, org: Org, kind: EngineKind) -> None:
    sim.script(Status(429, "slow down", retry_after=0))
    engine = make_engine(kind, sim)
    conversation = Conversation(org, "w0", "c0")
    reply = await conversation.say(engine, "hello")
    await engine.aclose()
    assert reply.text
    assert len(sim.requests) == 2
    assert sim.requests[0].body == sim.requests[1].body
    # The failed attempt streamed nothing, so the reply was streamed once.
    assert "".join(conversation.deltas[0]) == reply.text


async def test_a_hangup_before_any_response_is_retried(
    sim: Simulator, org: Org, kind: EngineKind
) -> None:
    sim.script(Hangup())
    reply = await hello(make_engine(kind, sim), org)
    assert reply.text
    assert len(sim.requests) == 2


async def test_retry_after_overrides_a_long_backoff(
    sim: Simulator, org: Org, kind: EngineKind
) -> None:
    sim.script(Status(503, retry_after=0), Status(429, retry_after=0))
    engine = make_engine(kind, sim, backoff=Backoff(base_s=600, cap_s=600))
    with anyio.fail_after(60):
        reply = await hello(engine, org)
    assert reply.text
    assert len(sim.requests) == 3


async def test_three_500s_fail_naming_provider_and_status(
    sim: Simulator, org: Org, kind: EngineKind
) -> None:
    sim.script(*[Status(500, "the backend fell over")] * 3)
    error = await fail(make_engine(kind, sim, max_retries=2), org)
    assert error.provider == kind
    assert error.status == 500
    assert error.retryable
    assert str(error).startswith(f"{kind}: HTTP 500")
    assert "the backend fell over" in str(error)
    assert "3 attempts" in str(error)
    assert len(sim.requests) == 3


async def test_a_client_error_is_not_retried(sim: Simulator, org: Org, kind: EngineKind) -> None:
    sim.script(Status(400, "prompt is too long"))
    error = await fail(make_engine(kind, sim), org)
    assert (error.status, error.retryable) == (400, False)
    assert "prompt is too long" in str(error)
    assert len(sim.requests) == 1


async def test_a_stalled_provider_times_out(sim: Simulator, org: Org, kind: EngineKind) -> None:
    sim.script(Stall())
    engine = make_engine(kind, sim, timeout_s=0.2)
    error = await fail(engine, org)
    assert error.provider == kind
    assert error.status is None
    assert error.retryable
    assert "within 0.2s" in str(error)


async def test_a_malformed_body_is_an_error(sim: Simulator, org: Org, kind: EngineKind) -> None:
    sim.script(Malformed())
    conversation = Conversation(org, "w0", "c0")
    error = await fail(make_engine(kind, sim), conversation)
    assert "malformed" in str(error)
    assert conversation.deltas[0] == []
    assert len(sim.requests) == 1


@pytest.mark.parametrize(
    "fault", [Drop(after_deltas=2), Cut(after_deltas=2), ErrorEvent(after_deltas=2)]
)
async def test_a_broken_stream_is_an_error_not_a_partial_reply(
    sim: Simulator, org: Org, kind: EngineKind, fault: Drop | Cut | ErrorEvent
) -> None:
    sim.script(fault)
    conversation = Conversation(org, "w0", "c0")
    error = await fail(make_engine(kind, sim), conversation)
    # What had arrived was streamed as it arrived; nothing was replayed.
    assert len(conversation.deltas[0]) == 2
    assert len(sim.requests) == 1
    assert error.retryable
    match fault:
        case ErrorEvent():
            assert "Overloaded" in str(error)
        case Cut():
            assert "the stream ended before" in str(error)
        case Drop():
            assert "mid-response" in str(error)


@pytest.mark.parametrize(
    ("kind", "retryable"),
    [
        ("overloaded_error", True),
        ("api_error", True),
        ("rate_limit_error", True),
        ("timeout_error", True),
        ("invalid_request_error", False),
    ],
)
async def test_an_anthropic_error_event_is_retryable_as_its_status_would_be(
    sim: Simulator, org: Org, kind: str, retryable: bool
) -> None:
    # Each of the API's error types (anthropic.types.shared.ErrorType) as an
    # event mid-stream: the ones a status would be retried for (529, 500,
    # 429, 504) say the turn may be retried.
    sim.script(ErrorEvent(after_deltas=1, message="it went wrong", kind=kind))
    error = await fail(make_engine("anthropic", sim), org)
    assert f"it went wrong ({kind})" in str(error)
    assert error.retryable is retryable


async def test_a_refused_connection_is_retried_then_reported(org: Org, kind: EngineKind) -> None:
    async with Simulator() as closed:
        pass  # its port, where nothing listens once it closed
    error = await fail(make_engine(kind, closed, max_retries=1), org)
    assert error.status is None
    assert "cannot connect" in str(error)
    assert "2 attempts" in str(error)


async def test_a_rejected_key_is_never_shown(org: Org, kind: EngineKind) -> None:
    wrong = "sk-wrong-key-9876543210-secret"
    async with Simulator(api_key=KEY) as sim:
        engine = make_engine(kind, sim, api_key=wrong)
        with pytest.raises(EngineError) as caught:
            await Conversation(org, "w0", "c0").say(engine, "hello")
        assert wrong not in repr(engine)
        await engine.aclose()
    # The simulator quotes the rejected key back, as OpenAI does; it is scrubbed.
    assert wrong not in str(caught.value)
    assert "[redacted]" in str(caught.value)
    assert (caught.value.status, caught.value.retryable) == (401, False)
    assert len(sim.requests) == 1


async def test_a_refusal_for_length_is_flagged_and_not_retried(
    sim: Simulator, org: Org, kind: EngineKind
) -> None:
    too_long = (
        Status(
            400,
            "This model's maximum context length is 8192 tokens.",
            code="context_length_exceeded",
        )
        if kind == "openai"
        else Status(400, "prompt is too long: 210000 tokens > 200000 maximum")
    )
    sim.script(too_long, Status(400, "max_tokens: must be positive"))
    engine = make_engine(kind, sim)
    refused = await fail(engine, org)
    other = await fail(make_engine(kind, sim), org)
    assert (refused.status, refused.context_exceeded, refused.retryable) == (400, True, False)
    assert (other.status, other.context_exceeded) == (400, False)
    assert len(sim.requests) == 2
