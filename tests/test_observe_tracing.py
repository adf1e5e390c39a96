"""OpenTelemetry traces: what a collector receives of a turn, over OTLP/HTTP."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from children import SECRET_ENV, children, ending, frozen, only_child
from harness import DaemonProcess, daemon_in_process
from orgs import simulated_engine, write_org
from otlp import Collector, attributes, collector
from prometheus import free_port
from simulator import Calls, Reply, Simulator

from rosterd.client import RosterClient
from rosterd.protocol import RunShown

pytestmark = pytest.mark.anyio

SECRET = "releases go out on Tuesdays"


REMEMBER_SECRET = ("remember", json.dumps({"text": SECRET}))


async def traced(
    tmp_path: Path, capture: bool, call: tuple[str, str] = REMEMBER_SECRET, sections: str = ""
) -> tuple[Collector, RunShown]:
    """One session turn that makes *call* (``remember``), traced to an
    in-process collector; *sections* are more of org.toml."""
    async with Simulator() as sim, collector() as otlp:
        settings = f'otlp_endpoint = "{otlp.url}"\ncapture_content = {str(capture).lower()}'
        org = write_org(
            tmp_path / "org",
            identity_chars=400,
            purpose_chars=100,
            engine=simulated_engine(sim),
            sections=f"[telemetry]\n{settings}\n{sections}",
        )
        sim.script(Calls((call,)), Reply("Noted."))
        async with (
            daemon_in_process(org, tmp_path / "state") as daemon,
            await daemon.client() as client,
        ):
            opened = await client.session_open("w0", "c0")
            await client.session_send(opened.session, f"remember: {SECRET}")
            shown = await client.runs_show(opened.session)
        # The daemon has stopped: its exporter sent every span before it did.
        return otlp, shown


def attrs(span: Any) -> dict[str, Any]:
    return attributes(span.attributes)


async def test_a_turn_is_one_trace_of_gen_ai_spans(tmp_path: Path) -> None:
    otlp, shown = await traced(tmp_path, capture=False)
    assert set(otlp.paths) == {"/v1/traces"}
    assert {r["service.name"] for r in otlp.resources} == {"rosterd"}

    (root,) = otlp.named("invoke_agent w0")
    assert root.parent_span_id == b""
    assert attrs(root) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "w0",
        "gen_ai.conversation.id": shown.info.id,
        "rosterd.surface": "session",
        "rosterd.channel": "c0",
        "rosterd.turn": 1,
    }
    children = [span for span in otlp.spans if span is not root]
    assert {span.trace_id for span in otlp.spans} == {root.trace_id}
    assert {span.parent_span_id for span in children} == {root.span_id}
    assert sorted({span.name for span in children}) == [
        "chat sim-1",
        "commit",
        "compile",
        "execute_tool remember",
    ]

    # One chat span per engine call, with the usage the provider reported.
    replies = [e for e in shown.transcript if e.role == "assistant"]
    chats = sorted(otlp.named("chat sim-1"), key=lambda s: attrs(s)["rosterd.step"])
    assert len(chats) == len(replies) == 2
    for span, entry in zip(chats, replies, strict=True):
        assert span.kind == span.SPAN_KIND_CLIENT
        assert entry.usage is not None
        assert attrs(span) == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "sim-1",
            "gen_ai.request.max_tokens": 1024,
            "gen_ai.response.model": "sim-1",
            "gen_ai.conversation.id": shown.info.id,
            "gen_ai.usage.input_tokens": entry.usage.input_tokens,
            "gen_ai.usage.output_tokens": entry.usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": entry.usage.cached_input_tokens,
            "gen_ai.usage.cache_creation.input_tokens": entry.usage.cache_write_tokens,
            "rosterd.step": entry.step,
            **({"gen_ai.response.finish_reasons": ["tool_calls"]} if entry.calls else {}),
        }

    (tool,) = otlp.named("execute_tool remember")
    (call,) = replies[0].calls
    assert attrs(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "remember",
        "gen_ai.tool.call.id": call.id,
        "rosterd.tool.status": "ok",
    }
    # No content leaves without capture_content: not the message, not the note.
    for span in otlp.spans:
        assert not any(key.startswith(("gen_ai.input", "gen_ai.output")) for key in attrs(span))
        assert SECRET not in repr(attrs(span))


async def test_a_tool_name_the_model_made_up_is_not_exported(tmp_path: Path) -> None:
    # The name of a call is model output like any other: text, of any length.
    # (One step: a request whose history calls an undefined tool is refused.)
    made_up = (SECRET * 1000, "{}")
    otlp, _ = await traced(tmp_path, False, made_up, "[gateway]\nmax_steps = 1")
    (tool,) = otlp.named("execute_tool")
    assert attrs(tool)["rosterd.tool.status"] == "refused"
    assert "gen_ai.tool.name" not in attrs(tool)
    for span in otlp.spans:
        assert SECRET not in span.name + repr(attrs(span))


async def test_capture_content_exports_what_each_call_added_and_its_reply(
    tmp_path: Path,
) -> None:
    otlp, _ = await traced(tmp_path, capture=True)
    chats = sorted(otlp.named("chat sim-1"), key=lambda s: attrs(s)["rosterd.step"])
    first, second = (attrs(span) for span in chats)
    (sent,) = json.loads(first["gen_ai.input.messages"])
    assert sent["role"] == "user" and SECRET in sent["parts"][0]["content"]
    (result,) = json.loads(second["gen_ai.input.messages"])
    assert result["role"] == "tool" and "note m-1 saved" in result["parts"][0]["content"]
    (answer,) = json.loads(second["gen_ai.output.messages"])
    assert answer == {"role": "assistant", "parts": [{"type": "text", "content": "Noted."}]}


async def test_a_stalled_collector_never_holds_up_a_turn_and_its_spans_are_counted(
    org_dir: Path, tmp_path: Path
) -> None:
    asked = anyio.Event()

    async def stall(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.receive()
            asked.set()
            await anyio.sleep_forever()

    listen = f"127.0.0.1:{free_port()}"
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        with (org_dir / "org.toml").open("a") as toml:
            toml.write(
                f'\n[metrics]\nlisten = "{listen}"\n'
                f'[telemetry]\notlp_endpoint = "http://127.0.0.1:{port}"\ntimeout_s = 1\n'
            )
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, stall)
            async with (
                daemon_in_process(org_dir, tmp_path / "state") as daemon,
                await daemon.client() as client,
            ):
                opened = await client.session_open("ada", "general")
                await client.session_send(opened.session, "first")
                await asked.wait()  # the exporter is stuck on the collector now
                with anyio.fail_after(30):  # a guard against a hang, not a timing
                    for n in range(5):
                        reply = await client.session_send(opened.session, f"turn {n}")
                        assert reply.text.startswith("[echo]")
                # Logged once the stuck export gave up (its timeout is 1 s) and counted it.
                await daemon.logged("the collector did not take")
                dropped = await _dropped(listen)
            tg.cancel_scope.cancel()
    assert dropped >= 1


async def _dropped(listen: str) -> float:
    """``rosterd_telemetry_dropped_total``, as the daemon's metrics show it."""
    pattern = re.compile(r"^rosterd_telemetry_dropped_total (\S+)$", re.M)
    async with httpx.AsyncClient() as http:
        found = pattern.search((await http.get(f"http://{listen}/metrics")).text)
    assert found is not None, "no rosterd_telemetry_dropped_total"
    return float(found[1])


async def test_the_standard_otlp_environment_turns_tracing_on(
    org_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with collector() as otlp:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "rosterd-eu")
        async with (
            daemon_in_process(org_dir, tmp_path / "state") as daemon,
            await daemon.client() as client,
        ):
            await client.run_direct("grace", "what is blocked?")
    assert set(otlp.paths) == {"/v1/traces"}
    assert {r["service.name"] for r in otlp.resources} == {"rosterd-eu"}
    (root,) = otlp.named("invoke_agent grace")
    assert attrs(root)["rosterd.surface"] == "direct"
    assert [span.name for span in otlp.spans if span.parent_span_id == root.span_id] == [
        "compile",
        "commit",
        "chat echo",
    ]


async def test_the_exporter_is_a_process_of_its_own(tmp_path: Path) -> None:
    async with collector() as otlp:
        telemetry = f'[telemetry]\notlp_endpoint = "{otlp.url}"\n'
        write_org(tmp_path / "org", identity_chars=200, purpose_chars=100, sections=telemetry)
        daemon = DaemonProcess(tmp_path / "org", tmp_path / "state", env=SECRET_ENV).start()
        with daemon:
            assert daemon.process is not None
            exporter = only_child(daemon.process.pid)
            # Frozen, as far as the daemon can tell: no turn waits on it.
            with frozen(exporter):
                async with await RosterClient.connect(daemon.socket) as client:
                    opened = await client.session_open("w0", "c0")
                    assert (await client.session_send(opened.session, "hello")).turn == 1
            # One that dies is logged and started again; turns go on, and
            # their spans reach the collector.
            os.kill(exporter, signal.SIGKILL)
            await daemon.logged("the span exporter was stopped by SIGKILL")
            await daemon.logged("the span exporter started again")
            (again,) = children(daemon.process.pid)
            assert again != exporter
            async with await RosterClient.connect(daemon.socket) as client:
                assert (await client.session_send(opened.session, "again")).turn == 2
            # It stops with a daemon that drains, and sends what it holds
            # first (to this process's collector, which serves meanwhile).
            with ending(again) as ended:
                assert await anyio.to_thread.run_sync(daemon.stop) == 0
                assert ended()
            # Turn 1's spans may have gone with the killed child; turn 2's came.
            turns = [attrs(root)["rosterd.turn"] for root in otlp.named("invoke_agent w0")]
            assert 2 in turns, turns
            # And with one killed outright.
            daemon.start()
            exporter = only_child(daemon.process.pid)
            with ending(exporter) as ended:
                daemon.kill9()
                assert ended(), "the exporter outlived a daemon killed with SIGKILL"
    assert "Traceback" not in daemon.log()
