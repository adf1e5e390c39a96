"""Named engines and fallbacks: a provider that cannot answer is answered for
by the next engine, before any output reached the client, and only then."""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path

import anyio
import pytest
from engines_org import fallback_org, one_turn, w0_session
from harness import Cli, daemon_in_process
from orgs import write_org
from simulator import Delay, Drop, Hangup, Page, Reply, Simulator, Status

from rosterd import ConfigError
from rosterd.client import RosterClient, RpcError
from rosterd.org import load_org
from rosterd.protocol import Delta, Wait

pytestmark = pytest.mark.anyio


def session(
    tmp_path: Path, primary: Simulator, fallback: Simulator, extra: str = ""
) -> AbstractAsyncContextManager[tuple[RosterClient, str]]:
    """A session of w0 in c0 on *primary*'s Messages API, falling back to *fallback*'s."""
    org = fallback_org(tmp_path / "org", primary.anthropic_url, fallback.openai_url, extra=extra)
    return w0_session(org, tmp_path / "state")


@pytest.mark.parametrize(
    "failure",
    [
        Status(529, "Overloaded"),
        Status(429, retry_after=0),
        Status(503),
        Status(401),
        Hangup(),
        Page(),
    ],
    ids=["529", "429", "503", "401", "reset", "not-a-stream"],
)
async def test_the_fallback_answers_when_the_engine_cannot_and_the_next_turn_tries_it_again(
    tmp_path: Path, failure: Status | Hangup | Page, cli: Cli
) -> None:
    async with Simulator() as primary, Simulator() as fallback:
        primary.script(failure, Reply("from claude"))
        fallback.script(Reply("from local"))
        async with session(tmp_path, primary, fallback) as (client, session_id):
            first = await client.session_send(session_id, "first")
            second = await client.session_send(session_id, "second")
            shown = await client.runs_show(session_id)

    assert (first.text, second.text) == ("from local", "from claude")
    assert (len(primary.requests), len(fallback.requests)) == (2, 1)
    # The fallback got the same conversation, in its own API's shape.
    assert fallback.requests[0].path == "/v1/chat/completions"
    verdicts = [e.cache for e in shown.transcript if e.role == "assistant"]
    assert verdicts[0] is not None and verdicts[0].verdict == "fallback"
    assert verdicts[0].cause is not None
    assert verdicts[0].cause.startswith("answered by fallback engine local: claude: ")
    assert verdicts[1] is not None and verdicts[1].verdict != "fallback"
    # Visible where operators look: runs show and stats cache.
    state = str(tmp_path / "state")
    shown_text = await cli.in_thread("server", "runs", "show", session_id, "--state", state)
    assert "answered by fallback engine local" in shown_text
    assert "fallback" in await cli.in_thread("server", "stats", "cache", "--state", state)


async def test_a_call_no_engine_answers_names_every_engine_tried(tmp_path: Path) -> None:
    async with Simulator() as primary, Simulator() as fallback:
        primary.script(Status(529, "Overloaded"))
        fallback.script(Status(502, "Bad gateway"))
        async with session(tmp_path, primary, fallback) as (client, session_id):
            with pytest.raises(RpcError) as failed:
                await client.session_send(session_id, "anyone?")
            # Nothing is lost: the next turn is answered, by the engine first.
            again = await client.session_send(session_id, "again")

    assert failed.value.code == 1002
    message = str(failed.value)
    assert "no engine answered: claude: anthropic: HTTP 529" in message
    assert "local: openai: HTTP 502" in message
    assert failed.value.data is not None
    assert [e["engine"] for e in failed.value.data["engines"]] == ["claude", "local"]
    assert again.turn == 2 and len(primary.requests) == 2


async def test_output_already_streamed_is_never_sent_again_to_another_engine(
    tmp_path: Path,
) -> None:
    async with Simulator() as primary, Simulator() as fallback:
        primary.script(Drop(after_deltas=1))
        async with session(tmp_path, primary, fallback) as (client, session_id):
            with pytest.raises(RpcError) as failed:
                await client.session_send(session_id, "tell me a long story")

    assert failed.value.code == 1002
    assert "mid-response" in str(failed.value)
    assert fallback.requests == []


async def test_a_request_too_long_is_no_reason_to_fall_back(tmp_path: Path) -> None:
    async with Simulator() as primary, Simulator() as fallback:
        primary.script(Status(400, "prompt is too long: 300000 tokens > 200000 maximum"))
        async with session(tmp_path, primary, fallback) as (client, session_id):
            # A fresh session's first request cannot roll over: it fails as it is.
            with pytest.raises(RpcError) as failed:
                await client.session_send(session_id, "hello")
    assert failed.value.data is not None and failed.value.data["context_exceeded"] is True
    assert fallback.requests == []


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ('[engines.spare]\nkind = "echo"\nfallback = ["nowhere"]\n', "engines.spare.fallback"),
        ('[workers.w1.engine]\nuse = "gpt"\n', "workers.w1.engine.use"),
    ],
)
def test_an_engine_name_that_is_no_engine_is_a_config_error(
    tmp_path: Path, extra: str, key: str
) -> None:
    write_org(tmp_path, workers=2, identity_chars=100, purpose_chars=10, sections=extra)
    with pytest.raises(ConfigError) as refused:
        load_org(tmp_path)
    assert refused.value.key == key
    assert "expected one of [engines.*]" in str(refused.value)


async def test_an_open_breaker_fails_a_call_at_once_without_asking_the_provider(
    tmp_path: Path,
) -> None:
    async with Simulator() as primary:
        primary.script(Status(500), Status(500))
        # No fallback: an open breaker fails the call at once.
        breaker = "max_retries = 0\nbreaker_failures = 2\nbreaker_cooldown_s = 600\n"
        org = fallback_org(tmp_path / "org", primary.anthropic_url, None, settings=breaker)
        async with w0_session(org, tmp_path / "state") as (client, session_id):
            for _ in range(2):
                with pytest.raises(RpcError):
                    await client.session_send(session_id, "are you there?")
            with pytest.raises(RpcError) as paused:
                await client.session_send(session_id, "and now?")
            status = await client.daemon_status()
    # Two calls failed; the third never reached the provider.
    assert len(primary.requests) == 2
    assert paused.value.code == 1002
    assert "paused by its breaker after 2 failed calls in a row" in str(paused.value)
    assert paused.value.data is not None and 590 < paused.value.data["retry_after"] <= 600
    engines = {e.name: e for e in status.engines}
    assert (engines["claude"].breaker, engines["claude"].failures) == ("open", 2)
    assert engines["engine"].breaker == "closed"


async def test_the_client_hears_why_its_turn_waits(tmp_path: Path) -> None:
    async with Simulator() as primary, Simulator() as fallback:
        primary.script(Status(429, retry_after=0), Status(529, "Overloaded"))
        org = fallback_org(
            tmp_path / "org",
            primary.anthropic_url,
            fallback.openai_url,
            settings="max_retries = 1\n",
        )
        fallback.script(Reply("from local"))
        result, waits = await one_turn(org, tmp_path / "state")

    assert result.text == "from local"
    assert [(w.run, w.reason) for w in waits] == [
        (result.run, "rate_limited"),
        (result.run, "fallback"),
    ]
    assert waits[0].retry_in_s == 0


async def test_the_fallback_answers_at_once_when_the_engine_asks_for_time(
    tmp_path: Path,
) -> None:
    async with Simulator() as primary, Simulator() as fallback:
        primary.script(Status(429, "Slow down", retry_after=3600))
        fallback.script(Reply("from local"))
        org = fallback_org(
            tmp_path / "org",
            primary.anthropic_url,
            fallback.openai_url,
            settings="max_retries = 3\n",
        )
        waits: list[Wait] = []
        async with w0_session(org, tmp_path / "state") as (client, session_id):
            with anyio.CancelScope() as waited_out:

                async def heard(wait: Wait) -> None:
                    waits.append(wait)
                    if wait.reason == "rate_limited":
                        waited_out.cancel()

                result = await client.session_send(session_id, "hello", on_wait=heard)

    assert not waited_out.cancel_called, "the call waited out the provider's retry-after"
    assert result.text == "from local"
    assert [w.reason for w in waits] == ["fallback"]
    assert len(primary.requests) == 1


def assistant_texts(body: bytes) -> list[str]:
    """The assistant messages of a request, as text, in either API's shape."""
    texts = []
    for message in json.loads(body)["messages"]:
        if message["role"] == "assistant":
            content = message["content"]
            if isinstance(content, list):
                content = "".join(b.get("text", "") for b in content if b["type"] == "text")
            texts.append(content)
    return texts


async def test_a_broken_stream_keeps_what_was_shown_and_the_next_request_carries_it(
    tmp_path: Path,
) -> None:
    async with Simulator(delta_chars=6) as primary, Simulator() as fallback:
        primary.script(Drop(after_deltas=3))
        pieces: list[str] = []

        async def collect(delta: Delta) -> None:
            pieces.append(delta.text)

        async with session(tmp_path, primary, fallback) as (client, session_id):
            with pytest.raises(RpcError):
                await client.session_send(session_id, "tell me a story", on_delta=collect)
            await client.session_send(session_id, "go on")
            shown = await client.runs_show(session_id)
            page = await client.runs_context(session_id, all=True)

    partial = "".join(pieces)
    assert len(pieces) == 3 and partial
    first = [(e.role, e.incomplete) for e in shown.transcript if e.turn == 1]
    assert first == [("user", False), ("assistant", True), ("error", False)]
    (kept,) = [e for e in shown.transcript if e.incomplete]
    assert kept.content == partial
    # Never sent again elsewhere; the next request holds it exactly as shown.
    assert fallback.requests == []
    assert assistant_texts(primary.requests[1].body) == [partial]
    assert [m.content for m in page.turns[-1].messages if m.role == "assistant"] == [partial]


async def test_without_a_fallback_a_call_fails_naming_its_engine_and_when_to_retry(
    tmp_path: Path,
) -> None:
    async with Simulator() as primary:
        primary.script(Status(429, "Slow down", retry_after=20))
        org = fallback_org(tmp_path / "org", primary.anthropic_url, None)
        async with w0_session(org, tmp_path / "state") as (client, session_id):
            with pytest.raises(RpcError) as failed:
                await client.session_send(session_id, "hello")
    assert failed.value.code == 1002
    assert failed.value.data is not None
    assert failed.value.data["retry_after"] == 20
    assert [e["engine"] for e in failed.value.data["engines"]] == ["claude"]
    assert "HTTP 429" in failed.value.data["engines"][0]["error"]


async def test_a_call_past_max_inflight_waits_its_turn_and_hears_it(tmp_path: Path) -> None:
    async with Simulator() as primary, Simulator() as fallback:
        # The first call is slow; the second, from another session, queues.
        primary.script(Delay(0.5))
        limited = "max_inflight = 1\nmax_retries = 0\n"
        org = fallback_org(
            tmp_path / "org", primary.anthropic_url, fallback.openai_url, settings=limited
        )
        waits: list[Wait] = []

        async def heard(wait: Wait) -> None:
            waits.append(wait)

        async with (
            daemon_in_process(org, tmp_path / "state") as daemon,
            await daemon.client() as one,
            await daemon.client() as two,
        ):
            first = await one.session_open("w0", "c0")
            second = await two.session_open("w0", "c1")
            async with anyio.create_task_group() as tg:
                tg.start_soon(one.session_send, first.session, "slow one")
                while not primary.requests:
                    await anyio.wait_all_tasks_blocked()
                tg.start_soon(partial(two.session_send, second.session, "next", on_wait=heard))
    assert [(w.run, w.reason) for w in waits] == [(second.session, "queued")]
    assert len(primary.requests) == 2 and fallback.requests == []


def test_a_named_engine_may_not_take_the_unnamed_engine_s_name(tmp_path: Path) -> None:
    named = '[engines.engine]\nkind = "echo"'
    write_org(tmp_path, identity_chars=100, purpose_chars=10, sections=named)
    with pytest.raises(ConfigError) as refused:
        load_org(tmp_path)
    assert refused.value.key == "engines.engine"
