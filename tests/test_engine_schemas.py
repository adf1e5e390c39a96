"""Every request shape the engines build, under every caching choice, checked
against the providers' published definitions and their caching rules."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import get_args

import msgspec
import pytest
from orgs import write_org
from provider_schemas import anthropic_errors, openai_errors
from simulator import Conversation

from rosterd.compiler import ToolCall, TurnInput
from rosterd.engines import MAX_BREAKPOINTS, AnthropicEngine, EngineRequest, OpenAIEngine
from rosterd.org import EngineConfig, load_org
from rosterd.protocol import CacheLifetime, ChatMessage

CHOICES: tuple[CacheLifetime | None, ...] = (None, *get_args(CacheLifetime))


def _transcripts(tmp_path: Path) -> list[Conversation]:
    """Sessions of w0 (with a connection) and of w1 (without), one turn
    in, and a second turn whose reply called tools and got results."""
    org = load_org(
        write_org(tmp_path, workers=2, channels=1, identity_chars=800, purpose_chars=200)
    )
    found = []
    for worker in ("w0", "w1"):
        talk = Conversation(org, worker, "c0")
        talk.request(TurnInput(text="hello", sender="alice"))
        found.append(talk)
        longer = Conversation(org, worker, "c0")
        longer.request(TurnInput(text="hello", sender="alice"))
        longer.messages.append(ChatMessage(role="assistant", content="hi"))
        longer.request(TurnInput(text="note this", sender="alice"))
        calls = (
            ToolCall("call_1", "remember", '{"text": "alice likes tea"}'),
            ToolCall("call_2", "file_gate", "not json"),
        )
        longer.messages.append(ChatMessage(role="assistant", content="", calls=calls))
        longer.messages += [
            ChatMessage(role="tool", content='{"result":"ok"}\n', call="call_1"),
            ChatMessage(role="tool", content='{"error":"bad"}\n', call="call_2"),
        ]
        found.append(longer)
    return found


def _requests(
    talk: Conversation, choice: CacheLifetime | None, previous: str | None
) -> EngineRequest:
    return EngineRequest(
        system=talk.system,
        messages=tuple(talk.messages),
        cache_ttl=choice,
        previous_message=previous,
    )


@pytest.mark.parametrize("model", ["gpt-5.6", "gpt-5.1", "llama"])
def test_openai_requests_are_valid_and_mark_at_most_four_breakpoints(
    tmp_path: Path, model: str
) -> None:
    engine = OpenAIEngine(EngineConfig(kind="openai", model=model), api_key=None)
    for talk, choice in itertools.product(_transcripts(tmp_path), CHOICES):
        body = engine.body(_requests(talk, choice, None))
        assert openai_errors(body) == [], choice
        request = json.loads(body)
        marks = [
            part
            for message in request["messages"]
            if isinstance(message["content"], list)
            for part in message["content"]
            if "prompt_cache_breakpoint" in part
        ]
        options = request.get("prompt_cache_options")
        if choice == "30m":
            assert options == {"mode": "explicit", "ttl": "30m"}
            assert 1 <= len(marks) <= MAX_BREAKPOINTS
            # One ends the conversation so far: the next request reads it all.
            last = request["messages"][-1]["content"]
            assert isinstance(last, list) and "prompt_cache_breakpoint" in last[-1]
        elif choice == "uncached":
            assert options == {"mode": "explicit"} and not marks
        else:
            assert options is None and not marks
        assert request.get("prompt_cache_retention") == ("24h" if choice == "24h" else None)
        assert len(request["prompt_cache_key"]) <= 64


@pytest.mark.parametrize("diagnose", [False, True])
def test_anthropic_requests_are_valid_and_order_their_breakpoints(
    tmp_path: Path, diagnose: bool
) -> None:
    config = EngineConfig(kind="anthropic", model="claude", diagnose_cache=diagnose)
    engine = AnthropicEngine(config, api_key=None)
    for talk, choice, previous in itertools.product(
        _transcripts(tmp_path), CHOICES, (None, "msg_01")
    ):
        body = engine.body(_requests(talk, choice, previous))
        assert anthropic_errors(body) == [], choice
        request = json.loads(body)
        blocks = [*request["system"]]
        for message in request["messages"]:
            blocks += message["content"]
        ttls = [b["cache_control"].get("ttl", "5m") for b in blocks if "cache_control" in b]
        assert 1 <= len(ttls) <= MAX_BREAKPOINTS
        # The API's rule: no 1-hour breakpoint after a 5-minute one.
        assert ttls == sorted(ttls, key=lambda ttl: ttl != "1h")
        assert set(ttls) == ({"1h"} if choice == "1h" else {"5m"})
        if diagnose:
            assert request["diagnostics"] == {"previous_message_id": previous}
        else:
            assert "diagnostics" not in request


def test_the_checks_refuse_what_the_providers_refuse() -> None:
    """The schema checks are not vacuous: each catches a request the API refuses."""
    openai = {
        "model": "gpt-5.6",
        "messages": [{"role": "user", "content": "hi"}],
        "prompt_cache_options": {"mode": "explicit", "ttl": "30m"},
    }
    assert openai_errors(msgspec.json.encode(openai)) == []
    for broken in (
        {"prompt_cache_options": {"mode": "always"}},
        {"prompt_cache_retention": "48h"},
        {"prompt_cache_options": {"mode": "explicit", "ttl": "1h"}},
        {"messages": [{"role": "user", "content": [{"type": "txt", "text": "hi"}]}]},
    ):
        assert openai_errors(msgspec.json.encode({**openai, **broken})), broken
    anthropic = {
        "model": "claude",
        "max_tokens": 10,
        "stream": True,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert anthropic_errors(msgspec.json.encode(anthropic)) == []
    block = {"type": "text", "text": "hi"}
    changes: tuple[dict[str, object], ...] = (
        {"diagnostics": {"previous_message": "msg_01"}},
        {"max_tokens": "ten"},
        {"unknown": 1},
        {"messages": [{"role": "user", "content": [{**block, "cache_kontrol": {}}]}]},
        {"messages": [{"role": "user", "content": [{**block, "cache_control": {"ttl": "1h"}}]}]},
        {"system": [{**block, "cache_control": {"type": "ephemeral", "ttl": "2h"}}]},
    )
    for change in changes:
        assert anthropic_errors(msgspec.json.encode({**anthropic, **change})), change
