"""Both engines with tools: definitions sent, streamed calls read, results sent back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from engines_org import engine_for
from orgs import write_org
from simulator import Calls, Conversation, Reply, Simulator, prompt_bytes

from rosterd.compiler import ToolCall, TurnInput
from rosterd.engines import EngineRequest
from rosterd.org import EngineKind, Org, load_org
from rosterd.protocol import ChatMessage

pytestmark = pytest.mark.anyio

ARGS = (
    '{"method":"GET","host":"api.github.com","path":"/repos/o/r/issues","query":{"q":"é\\u2028"}}'
)


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    # Five characters a delta: every call's arguments arrive in many pieces.
    async with Simulator(delta_chars=5) as simulator:
        yield simulator


@pytest.fixture
def org(tmp_path: Path) -> Org:
    return load_org(write_org(tmp_path))


async def discard(_: str) -> None:
    pass


async def test_streamed_calls_are_read_whole_and_results_extend_the_request(
    sim: Simulator, org: Org, kind: EngineKind
) -> None:
    engine = engine_for(kind, sim)
    conversation = Conversation(org, "w0", "c0")
    messages = list(conversation.request(TurnInput(text="list the issues")).messages)
    sim.script(Calls((("github", ARGS), ("file_gate", '{"summary":"ship?"}')), text="Looking."))
    reply = await engine.complete(EngineRequest(conversation.system, messages), discard)
    assert reply.text == "Looking."
    assert [(c.name, c.arguments) for c in reply.calls] == [
        ("github", ARGS),
        ("file_gate", '{"summary":"ship?"}'),
    ]
    assert len({c.id for c in reply.calls}) == 2
    messages.append(ChatMessage(role="assistant", content=reply.text, calls=reply.calls))
    for call in reply.calls:
        envelope = {"block": "tool", "call": call.id, "connection": call.name, "status": "ok"}
        messages.append(ChatMessage(role="tool", content=json.dumps(envelope), call=call.id))
    sim.script(Reply("Done."))
    final = await engine.complete(EngineRequest(conversation.system, messages), discard)
    await engine.aclose()
    assert final.text == "Done." and final.calls == ()
    first, second = (prompt_bytes(r) for r in sim.requests)
    assert second.startswith(first)
    body = json.loads(sim.requests[0].body)
    names = [t["function"]["name"] if kind == "openai" else t["name"] for t in body["tools"]]
    assert names == ["github", "file_gate", "remember", "forget"]
    schema = body["tools"][0]["function"]["parameters"] if kind == "openai" else None
    if kind == "anthropic":
        schema = body["tools"][0]["input_schema"]
    assert schema is not None and schema["properties"]["host"]["enum"] == ["api.github.com"]


async def test_anthropic_tools_come_before_the_first_breakpoint_and_marks_stay_within_four(
    sim: Simulator, org: Org
) -> None:
    engine = engine_for("anthropic", sim)
    conversation = Conversation(org, "w0", "c0")
    messages = list(conversation.request(TurnInput(text="go")).messages)
    call = ToolCall("toolu_x", "github", ARGS)
    messages.append(ChatMessage(role="assistant", content="", calls=(call,)))
    messages.append(ChatMessage(role="tool", content='{"block":"tool"}', call="toolu_x"))
    await engine.complete(EngineRequest(conversation.system, messages), discard)
    await engine.aclose()
    body = json.loads(sim.requests[0].body)
    marks = [b for b in body["system"] if "cache_control" in b]
    marks += [b for m in body["messages"] for b in m["content"] if "cache_control" in b]
    assert len(marks) <= 4
    # The newest message, the tool result, carries the last breakpoint.
    assert "cache_control" in body["messages"][-1]["content"][-1]
    assert body["messages"][-1]["content"][-1]["type"] == "tool_result"
    # An assistant message that only called tools has no empty text block.
    assert [b["type"] for b in body["messages"][1]["content"]] == ["tool_use"]
    prompt = prompt_bytes(sim.requests[0])
    first_boundary = conversation.system.text[: conversation.system.boundaries[0].offset]
    assert prompt.index(b"<tool>") < prompt.index(first_boundary.encode())


async def test_malformed_streamed_arguments_are_passed_on_unjudged(
    sim: Simulator, org: Org
) -> None:
    engine = engine_for("openai", sim)
    conversation = Conversation(org, "w0", "c0")
    request = conversation.request(TurnInput(text="go"))
    sim.script(Calls((("github", '{"method": "GET", "host"'),)))
    reply = await engine.complete(request, discard)
    await engine.aclose()
    # The engine reports what the model sent; validation is the host's job.
    assert reply.calls[0].arguments == '{"method": "GET", "host"'
