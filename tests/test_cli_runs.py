"""``roster server runs``: the trace tools, read from a real state directory.

One test proves that ``runs context`` prints exactly what the engine
received: the daemon talks to the provider simulator, which records every
request body, and the CLI's output is compared with those bodies.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import msgspec
import pytest
from harness import Cli, DaemonProcess, copy_org, set_engine
from orgs import write_org
from psycopg_pool import AsyncConnectionPool
from simulator import Simulator

from rosterd.cli._runs import render_context
from rosterd.client import RpcError
from rosterd.protocol import CONTEXT_PAGE_CHARS, ContextPage
from rosterd.stores.files import FileRuns
from rosterd.stores.postgres import migrate
from rosterd.stores.postgres._db import Database
from rosterd.stores.postgres._runs import PostgresRuns


def parse_context(data: bytes) -> list[tuple[str, bytes]]:
    """Split ``runs context`` output into (header, exact content) parts."""
    parts: list[tuple[str, bytes]] = []
    pos = 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        header = data[pos:end].decode()
        pos = end + 1
        if re.fullmatch(r"=== end of turn \d+( step \d+)? ===", header):
            continue
        match = re.fullmatch(r"=== (.+) \((\d+) bytes\) ===", header)
        assert match is not None, header
        size = int(match[2])
        parts.append((match[1], data[pos : pos + size]))
        assert data[pos + size : pos + size + 1] == b"\n"
        pos += size + 1
    return parts


def _chat(cli: Cli, monkeypatch: pytest.MonkeyPatch, socket: Path, *lines: str) -> str:
    """Chat in-process; returns the session id from the opening line."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in lines)))
    code, _, err = cli("chat", "--socket", str(socket), "--worker", "ada", "--channel", "general")
    assert code == 0, err
    return err.split()[1]


def test_list_show_context_work_after_the_daemon_stopped(
    daemon: DaemonProcess, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _chat(cli, monkeypatch, daemon.socket, "first", "second")
    run = json.loads(
        cli.text("run", "--socket", str(daemon.socket), "--worker", "grace", "hello", "--json")
    )["run"]
    daemon.stop()
    state = str(daemon.state)

    runs = cli.json("server", "runs", "list", "--state", state)
    assert [(r["id"], r["surface"], r["status"]) for r in runs] == [
        (session, "session", "open"),
        (run, "direct", "done"),
    ]
    listing = cli.text("server", "runs", "list", "--state", state).splitlines()
    assert listing[0].split()[:5] == ["RUN", "SURFACE", "WORKER", "CHANNEL", "STATUS"]
    assert listing[1].split()[:5] == [session, "session", "ada", "#general", "open"]
    newest = cli.json("server", "runs", "list", "--state", state, "--limit", "1")
    assert [r["id"] for r in newest] == [run]

    shown = cli.text("server", "runs", "show", session, "--state", state)
    assert shown.startswith(f"run {session}\n  surface session · worker ada · channel #general")
    assert "3 compilation(s), 2 turn(s) sent to the engine" in shown
    assert "compilation 1/3: system part (frozen for the session), ok" in shown
    assert "compilation 3/3: turn 2 input, ok" in shown
    assert re.search(r"^    after connections +\d+ +[0-9a-f]{64}$", shown, re.M)
    assert re.search(r"^    end of system +\d+ +[0-9a-f]{64}$", shown, re.M)
    assert re.search(r"^  route key rk-[0-9a-f]{48}$", shown, re.M)
    assert re.search(r"^  history +absent .* not the first turn of a fresh session$", shown, re.M)
    assert re.search(r"^  budget: total 48000 - system \d+ - request \d+ = advisory", shown, re.M)
    assert re.search(r"^  cache-read ratio 0\.0% \(0 cached of \d+ input tokens\)$", shown, re.M)

    report = cli.json("server", "runs", "show", session, "--state", state)
    system = report["records"][0]
    assert system["kind"] == "system"
    assert [b["offset"] for b in system["boundaries"]][-1] == sum(
        b["rendered_chars"] for b in system["blocks"]
    )
    assert [t["turn"] for t in report["usage"]["turns"]] == [1, 2]

    # Default: the latest turn only; --all: every turn, each extending the last.
    latest = cli.json("server", "runs", "context", session, "--state", state)
    every = cli.json("server", "runs", "context", session, "--all", "--state", state)
    assert [r["turn"] for r in latest] == [2]
    assert [r["turn"] for r in every] == [1, 2]
    assert every[1] == latest[0]
    assert every[0]["system"] == every[1]["system"]
    first, second = every[0]["messages"], every[1]["messages"]
    assert second[: len(first)] == first
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert '"text":"second"' in second[2]["content"]

    code, out, err = cli.raw("server", "runs", "context", session, "--all", "--state", state)
    assert (code, err) == (0, "")
    parts = parse_context(out)
    assert parts[0] == ("turn 1 tools", every[0]["tools"].encode())
    assert parts[1] == ("turn 1 system", every[0]["system"].encode())
    assert [header for header, _ in parts] == [
        "turn 1 tools",
        "turn 1 system",
        "turn 1 message 1/1 user",
        "turn 2 tools",
        "turn 2 system",
        "turn 2 message 1/3 user",
        "turn 2 message 2/3 assistant",
        "turn 2 message 3/3 user",
    ]
    assert [content for _, content in parts[5:]] == [m["content"].encode() for m in second]

    code, out, err = cli.raw("server", "runs", "show", "nope", "--state", state)
    assert (code, out, err) == (1, b"", "roster: unknown run 'nope'\n")


def test_state_directory_mistakes(cli: Cli, tmp_path: Path) -> None:
    code, out, err = cli.raw("server", "runs", "list")
    assert (code, out) == (2, b"")
    assert err == "roster: no state: pass --state DIR|URL or set ROSTER_STATE\n"
    code, _, err = cli.raw("server", "runs", "list", "--state", str(tmp_path / "none"))
    assert (code, err) == (1, f"roster: {tmp_path / 'none'}: no such state directory\n")
    code, _, err = cli.raw("server", "runs", "show", "../etc", "--state", str(tmp_path))
    assert code == 2 and err.startswith("roster: invalid run id '../etc'")
    assert (
        cli.text("server", "runs", "list", "--state", str(tmp_path)) == f"no runs in {tmp_path}\n"
    )


def test_runs_list_names_a_run_it_cannot_read_and_lists_the_others(
    daemon: DaemonProcess, cli: Cli
) -> None:
    run = json.loads(
        cli.text("run", "--socket", str(daemon.socket), "--worker", "grace", "hi", "--json")
    )["run"]
    daemon.stop()
    (daemon.state / "runs" / "d-bad").mkdir()
    (daemon.state / "runs" / "d-bad" / "run.json").write_text('{"id": ')
    command = [sys.executable, "-m", "rosterd.cli", "server", "runs", "list"]
    for json_flag in ((), ("--json",)):
        listed = subprocess.run(
            [*command, *json_flag, "--state", str(daemon.state)], capture_output=True, text=True
        )
        assert listed.returncode == 0, listed.stderr
        assert run in listed.stdout and "d-bad" not in listed.stdout
        [warning] = listed.stderr.splitlines()
        assert warning.startswith("run d-bad cannot be read: ") and "unreadable" in warning


def test_failed_compilation_names_block_size_and_limit(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = copy_org(tmp_path / "org")
    identity = "# Grace\n" + "g" * 13000 + "\n"
    (org / "workers/grace/identity.md").write_text(identity)
    size = len(f"<identity>\n{identity}</identity>\n")
    with DaemonProcess(org, tmp_path / "state").start() as daemon:
        socket = str(daemon.socket)
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
        code, out, err = cli.raw(
            "chat", "--socket", socket, "--worker", "grace", "--channel", "general"
        )
        code_direct, _, err_direct = cli("run", "--socket", socket, "--worker", "grace", "hi")
    assert (code, out) == (1, b"")
    match = re.fullmatch(
        rf"roster: block 'identity' is {size} characters, over its limit of 12000: "
        r"identity.md is inserted whole or not at all "
        r"\(run (s-[\w-]+); see 'roster server runs show (s-[\w-]+)'\)\n",
        err,
    )
    assert match is not None, err
    assert match[1] == match[2]
    session = match[1]
    assert code_direct == 1 and "(run d-" in err_direct

    state = str(daemon.state)
    shown = cli.text("server", "runs", "show", session, "--state", state)
    assert "status failed" in shown
    assert "compilation 1/1: system part (frozen for the session), FAILED" in shown
    assert (
        f"  failed: block 'identity' is {size} characters, over its limit of 12000: "
        "identity.md is inserted whole or not at all"
    ) in shown
    assert "no model input was produced; the engine received nothing" in shown
    assert re.search(rf"^  identity +failed +\d+ +{size} +12000 ", shown, re.M)
    assert "usage: none reported yet" in shown

    error = cli.json("server", "runs", "show", session, "--state", state)["records"][0]["error"]
    assert (error["block"], error["size"], error["limit"]) == ("identity", size, 12000)

    code, out, err = cli.raw("server", "runs", "context", session, "--state", state)
    assert (code, out) == (1, b"")
    assert err == (
        f"roster: run '{session}' sent nothing to the engine: its compilation failed "
        f"(block 'identity' is {size} characters, over its limit of 12000); "
        f"see 'roster server runs show {session}'\n"
    )


async def _roster(*argv: str, stdin: bytes = b"") -> bytes:
    done = await anyio.run_process(
        [sys.executable, "-m", "rosterd.cli", *argv], input=stdin, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


@pytest.mark.long
@pytest.mark.anyio
async def test_runs_context_is_exactly_what_the_engine_received(tmp_path: Path) -> None:
    async with Simulator(openai_min_tokens=64, openai_step_tokens=16) as sim:
        org = copy_org(tmp_path / "org")
        set_engine(org, f'kind = "openai"\nmodel = "sim-model"\nbase_url = "{sim.openai_url}"')
        daemon = DaemonProcess(org, tmp_path / "state")
        await anyio.to_thread.run_sync(daemon.start)
        try:
            socket = str(daemon.socket)
            lines = ["hello", 'naïve café — ✓ {"block":"x"}', "third"]
            chat_in = "".join(f"{line}\n" for line in lines).encode()
            await _roster(
                "chat", "--socket", socket, "--worker", "ada", "--channel", "general",
                stdin=chat_in,
            )  # fmt: skip
            direct = json.loads(
                await _roster("run", "--socket", socket, "--worker", "grace", "ünïcode", "--json")
            )
        finally:
            await anyio.to_thread.run_sync(daemon.stop)

    state = str(daemon.state)
    bodies = [json.loads(body) for body in sim.bodies()]
    assert len(bodies) == 4
    runs = json.loads(await _roster("server", "runs", "list", "--state", state, "--json"))
    session = next(r["id"] for r in runs if r["surface"] == "session")

    every = json.loads(
        await _roster("server", "runs", "context", session, "--all", "--state", state, "--json")
    )
    assert [r["turn"] for r in every] == [1, 2, 3]
    for request, body in zip(every, bodies[:3], strict=True):
        sent = [{"role": "system", "content": request["system"]}, *request["messages"]]
        assert body["messages"] == sent

    # The text format carries the same bytes.
    text = await _roster("server", "runs", "context", session, "--all", "--state", state)
    parts = parse_context(text)
    received = [m["content"].encode() for body in bodies[:3] for m in body["messages"]]
    assert [content for header, content in parts if not header.endswith("tools")] == received
    # The tool definitions, in their canonical form, head each request.
    tools = [content for header, content in parts if header.endswith("tools")]
    assert len(tools) == 3
    sent = [t["function"]["name"] for t in bodies[0]["tools"]]
    assert [json.loads(line)["name"] for line in tools[0].splitlines()] == sent
    assert "naïve café — ✓".encode() in parts[-3][1]

    (only,) = json.loads(
        await _roster("server", "runs", "context", direct["run"], "--state", state, "--json")
    )
    assert bodies[3]["messages"] == [
        {"role": "system", "content": only["system"]},
        *only["messages"],
    ]

    # Usage as the provider reported it; the cache-read ratio is summed over turns.
    report = json.loads(
        await _roster("server", "runs", "show", session, "--state", state, "--json")
    )
    assert bodies[0]["prompt_cache_key"] == report["records"][0]["route_key"]
    usage = report["usage"]
    turns = usage["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert turns[0]["cached_input_tokens"] == 0
    assert all(t["cached_input_tokens"] > 0 for t in turns[1:])
    assert usage["input_tokens"] == sum(t["input_tokens"] for t in turns)
    assert usage["cached_input_tokens"] == sum(t["cached_input_tokens"] for t in turns)
    ratio = usage["cached_input_tokens"] / usage["input_tokens"]
    assert usage["cache_read_ratio"] == pytest.approx(ratio)
    shown = (await _roster("server", "runs", "show", session, "--state", state)).decode()
    assert (
        f"cache-read ratio {ratio:.1%} ({usage['cached_input_tokens']} cached of "
        f"{usage['input_tokens']} input tokens)"
    ) in shown
    row = next(line.split() for line in shown.splitlines() if line.startswith("  2 "))
    assert [int(v) for v in row[1:4]] == [
        turns[1]["input_tokens"],
        turns[1]["cached_input_tokens"],
        turns[1]["input_tokens"] - turns[1]["cached_input_tokens"],
    ]


def test_show_explains_a_block_shrunk_under_budget(
    daemon: DaemonProcess, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    socket = str(daemon.socket)
    for number in range(10):
        note = f"note {number}: " + "m" * 600
        cli.text("memory", "add", "--socket", socket, "--worker", "ada", note)
    run = cli.json("run", "--socket", socket, "--worker", "ada", "what", "now")["run"]
    state = str(daemon.state)
    record = cli.json("server", "runs", "show", run, "--state", state)["records"][0]
    memory = next(b for b in record["blocks"] if b["block"] == "memory")
    assert memory["status"] == "shrunk"
    assert memory["items"] + memory["omitted"] == 10 and memory["omitted"] > 0
    # ada's [workers.ada.context] memory = 4000 caps the block.
    assert record["budget"]["memory"] == memory["rendered_chars"] <= memory["limit"] == 4000

    shown = cli.text("server", "runs", "show", run, "--state", state)
    kept, total = memory["items"], 10
    assert re.search(
        rf"^  memory +shrunk .* kept {kept} of {total}: lowest-ranked items dropped to fit$",
        shown,
        re.M,
    )
    # Each advisory block's share, in the order the input shows them.
    assert re.search(
        rf"^ +memory {memory['rendered_chars']}/4000 \+ briefing 0/\d+ \+ history 0"
        rf" \+ backlog 0/\d+ = {memory['rendered_chars']} of \d+$",
        shown,
        re.M,
    )


@pytest.mark.anyio
async def test_every_turn_context_is_paged_and_the_cli_prints_the_pages_as_one(
    tmp_path: Path, cli: Cli
) -> None:
    context = "[context]\ntotal = 300000\ntask = 250000\nsession_chars = 2000000"
    org = write_org(tmp_path / "org", workers=["ada"], sections=context)
    with DaemonProcess(org, tmp_path / "state").start() as daemon:
        async with await daemon.client() as client:
            opened = await client.session_open("ada", "c0")
            session = opened.session
            for n in range(30):  # turn 30 alone is ~600 KB; all 30 together ~9 MB
                text = f"turn {n} " + "x" * 20_000
                await client.session_send(session, text)
            pages: list[ContextPage] = []
            after = 0
            while True:
                page = await client.runs_context(session, all=True, after=after)
                pages.append(page)
                if page.next is None:
                    break
                after = page.next
            limited = await client.runs_context(session, all=True, after=0, limit=2)
            latest = await client.runs_context(session)
            with pytest.raises(RpcError) as caught:
                await client.runs_context(session, after=3)

    assert caught.value.code == -32602
    assert [t.turn for t in limited.turns] == [1, 2] and limited.next == 2
    assert [t.turn for t in latest.turns] == [30] and latest.next is None
    turns = [turn for page in pages for turn in page.turns]
    assert [t.turn for t in turns] == list(range(1, 31))
    assert len(pages) >= 8
    for page in pages:  # bounded: whole turns up to the page's character budget
        chars = sum(len(t.system) + sum(len(m.content) for m in t.messages) for t in page.turns)
        assert chars <= CONTEXT_PAGE_CHARS
        assert len(msgspec.json.encode(page)) < CONTEXT_PAGE_CHARS * 1.05
    assert turns[-1] == latest.turns[0]

    state = str(daemon.state)
    every = ("server", "runs", "context", session, "--all", "--state", state)
    code, out, err = await anyio.to_thread.run_sync(cli.raw, *every)
    assert (code, err) == (0, "")
    assert out == render_context(turns)
    code, out, err = await anyio.to_thread.run_sync(cli.raw, *every, "--json")
    assert (code, err) == (0, "")
    assert out == msgspec.json.format(msgspec.json.encode(turns), indent=2) + b"\n"


async def _copy_into_database(state: Path, url: str) -> list[str]:
    """Every run of the state directory written to the database as the daemon would;
    checks each trace exports as the file's exact bytes. The run ids."""
    files = FileRuns(state)
    async with AsyncConnectionPool(url, open=False, kwargs={"autocommit": True}) as pool:
        async with pool.connection() as conn:
            await migrate(conn, "test database")
        database = PostgresRuns(Database(pool, "test database"))
        for info in (await files.all()).runs:
            run = await database.create(info)
            for record in await files.context(info.id):
                await run.trace(record)
            await run.record_many(await files.transcript(info.id))
            session = await files.load_session(info.id)
            if session is not None:
                await database.save_session(info.id, session)
            context = state / "runs" / info.id / "context.jsonl"
            assert await database.export(info.id) == context.read_bytes()
        return [info.id for info in (await files.all()).runs]


def test_every_reading_command_prints_the_same_bytes_from_a_database(
    daemon: DaemonProcess,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    postgres_url: str,
) -> None:
    session = _chat(cli, monkeypatch, daemon.socket, "first", "second", "third")
    assert cli("run", "--socket", str(daemon.socket), "--worker", "grace", "hello")[0] == 0
    daemon.stop()
    state = str(daemon.state)
    runs = anyio.run(_copy_into_database, daemon.state, postgres_url)
    assert session in runs and len(runs) == 2

    commands: list[tuple[str, ...]] = [("runs", "list"), ("stats", "cache")]
    for run in runs:
        commands += [("runs", "show", run), ("runs", "context", run)]
        commands += [("runs", "context", run, "--all")]
        exported = cli.raw("server", "runs", "export", run, "--state", postgres_url)
        assert exported == (0, (daemon.state / "runs" / run / "context.jsonl").read_bytes(), "")
        assert cli.raw("server", "runs", "export", run, "--state", state) == exported
    for command in commands:
        for extra in ((), ("--json",)):
            from_files = cli.raw("server", *command, *extra, "--state", state)
            assert from_files[0] == 0 and from_files[1], (command, from_files[2])
            assert cli.raw("server", *command, *extra, "--state", postgres_url) == from_files
    monkeypatch.setenv("ROSTER_STATE", postgres_url)
    assert cli.raw("server", "runs", "context", session, "--all") == cli.raw(
        "server", "runs", "context", session, "--all", "--state", state
    )
    code, out, err = cli.raw("server", "runs", "show", "nope")
    assert (code, out, err) == (1, b"", "roster: unknown run 'nope'\n")


def test_database_mistakes_name_the_database_without_its_password(
    cli: Cli, postgres_url: str
) -> None:
    refused = "postgresql://rosterd:hunter2@127.0.0.1:1/state"
    code, out, err = cli.raw("server", "runs", "list", "--state", refused)
    assert (code, out) == (1, b"")
    assert err.startswith("roster: postgresql://rosterd:***@127.0.0.1:1/state: connect failed: ")
    assert "hunter2" not in err
    # A database the daemon never started on: nothing is created from here.
    code, out, err = cli.raw("server", "stats", "cache", "--state", postgres_url)
    assert (code, out) == (1, b"")
    assert err == (
        f"roster: {postgres_url}: holds no rosterd state (no schema); "
        "the daemon creates it when it starts\n"
    )
    anyio.run(_copy_into_database, Path("/nonexistent"), postgres_url)
    assert (
        cli.text("server", "runs", "list", "--state", postgres_url) == "no runs in the database\n"
    )


def test_runs_show_says_why_each_memory_note_was_in_the_block(tmp_path: Path, cli: Cli) -> None:
    org = copy_org(tmp_path / "org")
    with DaemonProcess(org, tmp_path / "state").start() as daemon:
        socket = str(daemon.socket)
        for text in ("deploys are on fridays", "the staging deploy broke", "tea at four"):
            cli.text("memory", "add", "--socket", socket, "--worker", "grace", text)
        run = json.loads(
            cli.text("run", "--socket", socket, "--worker", "grace", "deploy staging?", "--json")
        )["run"]
    shown = cli.text("server", "runs", "show", run, "--state", str(daemon.state))
    assert "  memory notes, best first (score: the message's words it holds; +borrowed)" in shown
    assert re.search(r"^    m-2  \d+\.\d{3}  deploy, staging; beside m-1$", shown, re.M)
    assert re.search(r"^    m-1  \d+\.\d{3}  deploy; beside m-2$", shown, re.M)
    assert re.search(r"^    m-3  0\.\d{3}  beside m-2$", shown, re.M)
    record = cli.json("server", "runs", "show", run, "--state", str(daemon.state))["records"][0]
    (memory,) = (b for b in record["blocks"] if b["block"] == "memory")
    assert [(n["id"], n["terms"]) for n in memory["notes"][:2]] == [
        ("m-2", ["deploy", "staging"]),
        ("m-1", ["deploy"]),
    ]


def test_the_state_is_a_directory_a_file_url_or_a_known_database_scheme(
    tmp_path: Path, cli: Cli
) -> None:
    (tmp_path / "runs").mkdir()
    assert cli.text("server", "runs", "list", "--state", f"file://{tmp_path}") == (
        f"no runs in {tmp_path}\n"
    )
    code, out, err = cli.raw("server", "runs", "list", "--state", "redis://localhost/0")
    assert (code, out) == (1, b"")
    assert err == (
        "roster: no state backend for redis:// (known: file://, postgresql://, postgres://)\n"
    )
    code, _, err = cli.raw(
        "serve",
        "--org",
        str(copy_org(tmp_path / "org")),
        "--state",
        "redis://x",
        "--socket",
        str(tmp_path / "s.sock"),
    )
    assert code == 1 and "no state backend for redis://" in err
