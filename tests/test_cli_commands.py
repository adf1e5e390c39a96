"""The client commands against a real daemon (echo engine) and state directory.

Most commands run in-process through ``main(argv)``; chat, and the cases
where the process boundary matters (exit status, no traceback), run as real
``python -m rosterd.cli`` processes.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from harness import Cli, DaemonProcess

from rosterd.bridge import MENTION_RATE, PRIVATE_RATE, SEND_RATE, BridgeConfig


def _cli(*argv: str, stdin: str = "", env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "rosterd.cli", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def roster(daemon: DaemonProcess, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``roster`` in-process, finding the daemon's socket through ROSTER_STATE."""
    monkeypatch.setenv("ROSTER_STATE", str(daemon.state))
    return cli


def test_chat_streams_replies_and_summarises_each_turn(daemon: DaemonProcess) -> None:
    code, out, err = _cli(
        "chat", "--socket", str(daemon.socket), "--worker", "ada", "--channel", "general",
        "--from", "alice", stdin="hello there\n\nsecond turn\n",
    )  # fmt: skip
    assert code == 0, err
    replies = out.splitlines()
    assert len(replies) == 2
    assert replies[0].startswith("[echo] turn 1: ") and replies[0].endswith("You said: hello there")
    assert replies[1].startswith("[echo] turn 2: ") and replies[1].endswith("You said: second turn")
    first, *rest = err.splitlines()
    session = first.split()[1]
    assert first == f"session {session} with ada in #general. Ctrl-D to leave."
    summaries = [line.replace("alice> ", "") for line in rest if "[" in line]
    assert [s.split(":")[0] for s in summaries] == [f"[{session} turn 1", f"[{session} turn 2"]
    assert all("message " in s and "/48000 chars" in s and " out]" in s for s in summaries)
    assert "Traceback" not in err

    # The same pair resumes the same session.
    code, _, err = _cli(
        "chat", "--socket", str(daemon.socket), "--worker", "ada", "--channel", "general"
    )
    assert code == 0
    assert err.splitlines()[0] == (
        f"session {session} with ada in #general, resumed after turn 2. Ctrl-D to leave."
    )


def test_chat_goes_on_after_a_failed_compilation(daemon: DaemonProcess) -> None:
    too_long = "x" * 24001
    code, out, err = _cli(
        "chat", "--socket", str(daemon.socket), "--worker", "grace", "--channel", "general",
        stdin=f"{too_long}\nstill here\n",
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[-1].endswith("You said: still here")
    session = err.split()[1]
    failure = next(line for line in err.splitlines() if line.startswith("roster: "))
    assert failure.startswith("roster: block 'message' is ")
    assert "over its limit of 24000: a message is never truncated" in failure
    assert failure.endswith(f"(run {session}; see 'roster server runs show {session}')")


def test_chat_reports_a_scope_mistake_in_one_line(daemon: DaemonProcess) -> None:
    code, out, err = _cli(
        "chat", "--socket", str(daemon.socket), "--worker", "grace", "--channel", "releases"
    )
    assert (code, out) == (1, "")
    assert err == (
        "roster: unknown worker 'grace': not a member of channel 'releases' "
        "(channels.releases.workers)\n"
    )


def test_run_streams_the_reply_and_prints_a_summary(roster: Cli) -> None:
    code, out, err = roster("run", "--worker", "grace", "--from", "bob", "hi", "there")
    assert code == 0, err
    assert out.startswith("[echo] turn 1: ") and out.endswith("You said: hi there\n")
    summary = err.strip()
    assert summary.startswith("[d-") and " turn 1: identity " in summary
    assert "scope " in summary and "message " in summary
    result = roster.json("run", "--worker", "grace", "--from", "bob", "hi", "there")
    # Without --json the streamed deltas are exactly the reply.
    assert out == result["text"] + "\n"
    assert result["run"].startswith("d-") and result["turn"] == 1
    assert {b["block"] for b in result["blocks"]} >= {"identity", "policy", "scope", "message"}


def test_task_submit_get_list(roster: Cli) -> None:
    code, out, err = roster(
        "task", "submit", "--worker", "ada", "--channel", "general", "ship", "it"
    )
    assert (code, err) == (0, "")
    assert out in ("task-1 queued: ada in #general\n", "task-1 running: ada in #general\n")
    task = roster.json("task", "get", "task-1", "--wait", "20")  # the daemon answers once it ran
    assert task["status"] == "done"
    assert task["reply"].endswith("You said: ship it")
    run = task["runs"][0]

    code, out, _ = roster("task", "get", "task-1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "task-1  done"
    assert lines[1] == "worker ada · channel #general"
    assert f"runs {run}" in lines
    assert "text: ship it" in lines
    assert f"reply: {task['reply']}" in lines

    code, out, _ = roster("task", "list")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["TASK", "STATUS", "WORKER", "CHANNEL", "SUBMITTED", "RUNS", "TEXT"]
    assert row.split()[:4] == ["task-1", "done", "ada", "#general"]
    assert [t["id"] for t in roster.json("task", "list")] == ["task-1"]
    roster("task", "submit", "--worker", "ada", "--channel", "general", "again")
    newest = roster.json("task", "list", "--limit", "1")
    assert [t["id"] for t in newest] == ["task-2"]

    code, out, err = roster("task", "get", "task-9")
    assert (code, out, err) == (1, "", "roster: unknown task 'task-9'\n")


def test_memory_gate_and_channel_commands_reach_the_next_compilation(
    roster: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = roster("memory", "add", "--worker", "ada", "prefers", "small", "PRs")
    assert (code, out) == (0, "memory m-1 added for ada (all channels)\n")
    item = roster.json("memory", "add", "--worker", "ada", "--channel", "general", "ship on Fri")
    assert (item["id"], item["channel"], item["text"]) == ("m-2", "general", "ship on Fri")
    code, out, _ = roster("memory", "list", "--worker", "ada")
    assert out.splitlines()[0].split() == ["ID", "SCOPE", "AUTHOR", "CREATED", "TEXT"]
    rows = [line.split(None, 4) for line in out.splitlines()[1:]]
    assert [r[:3] for r in rows] == [["m-1", "*", "operator"], ["m-2", "#general", "operator"]]
    assert rows[0][4].strip() == "prefers small PRs"

    code, out, _ = roster("memory", "forget", "m-2", "--worker", "ada", "--because", "it's Thu")
    assert (code, out) == (0, "memory m-2 retired for ada: it never ranks again\n")
    code, out, _ = roster("memory", "list", "--worker", "ada")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["m-1"]
    listed = roster.json("memory", "list", "--worker", "ada", "--all")
    assert [(n["id"], n["retired"] and n["retired"]["because"]) for n in listed] == [
        ("m-1", None),
        ("m-2", "it's Thu"),
    ]
    code, out, _ = roster("memory", "list", "--worker", "ada", "--all")
    assert out.splitlines()[0].split()[-1] == "RETIRED"
    assert "by operator: it's Thu" in out.splitlines()[2]
    code, out, err = roster("memory", "forget", "m-2", "--worker", "ada", "--because", "again")
    assert (code, out, err) == (1, "", "roster: unknown note 'm-2'\n")

    code, out, _ = roster("gate", "file", "--worker", "ada", "--channel", "general", "ok", "to?")
    assert (code, out) == (0, "gate g-1 filed for ada (#general)\n")
    roster("gate", "file", "--worker", "grace", "deploy?")
    gates = roster.json("gate", "list", "--worker", "ada")
    assert [(g["id"], g["status"], g["summary"]) for g in gates] == [("g-1", "open", "ok to?")]
    code, out, _ = roster("gate", "list")
    assert [line.split()[:3] for line in out.splitlines()[1:]] == [
        ["g-1", "open", "ada"],
        ["g-2", "open", "grace"],
    ]

    # A direct run of ada now sees the worker-wide memory and the open gate
    # is only for #general, so it stays out of a run with no channel.
    result = roster.json("run", "--worker", "ada", "small", "PRs", "please")
    blocks = {b["block"]: b for b in result["blocks"]}
    assert (blocks["memory"]["status"], blocks["memory"]["items"]) == ("included", 1)
    assert blocks["briefing"]["status"] == "absent"

    code, out, _ = roster("gate", "resolve", "g-1", "--outcome", "yes", "--note", "go")
    assert (code, out) == (0, "gate g-1 resolved: yes\n")
    resolved = roster.json("gate", "list", "--worker", "ada")[0]
    assert (resolved["status"], resolved["outcome"], resolved["note"]) == ("resolved", "yes", "go")

    code, out, _ = roster("channel", "post", "--channel", "general", "--from", "bob", "hi", "all")
    assert (code, out) == (0, "posted message 1 to #general as bob\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO("from stdin\n"))
    message = roster.json("channel", "post", "--channel", "general", "--from", "eve", "-")
    assert (message["seq"], message["sender"], message["text"]) == (2, "eve", "from stdin")

    code, out, err = roster("channel", "post", "--channel", "nowhere", "--from", "bob", "x")
    assert (code, err) == (1, "roster: unknown channel 'nowhere'\n")
    code, out, err = roster("gate", "resolve", "g-9", "--outcome", "no")
    assert (code, err) == (1, "roster: unknown gate 'g-9'\n")


def test_status(roster: Cli, daemon: DaemonProcess) -> None:
    assert daemon.process is not None
    code, out, err = roster("status")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("rosterd ") and f"pid {daemon.process.pid}" in lines[0]
    assert f"socket {daemon.socket}" in lines[0]
    assert lines[1] == "sessions 0 warm · tasks 0 running"
    status = roster.json("status")
    assert status["pid"] == daemon.process.pid
    assert status["config_error"] is None
    assert status["config_generation"] == 1


def test_usage_errors_exit_2_in_one_line(roster: Cli) -> None:
    bridge = ["bridge", "irc", "--server", "h:1", "--nick", "n", "--worker", "w"]
    cases = [
        (["task"], "roster: task: the following arguments are required: ACTION"),
        (["run", "hello"], "roster: run: the following arguments are required: --worker"),
        (["gate", "resolve", "g-1"], "roster: gate resolve: the following arguments are required"),
        (["bogus"], "roster: argument COMMAND: invalid choice: 'bogus'"),
        (["memory", "list", "--worker", "a/b"], "roster: invalid params"),
        (["run", "--worker", "../x", "hi"], "roster: invalid params"),
        (["memory", "add", "--worker", "ada", " "], "roster: the memory text is empty"),
        # Numbers an option cannot mean: never, nothing, or too many.
        (["task", "get", "t-1", "--wait", "inf"], "roster: task get: argument --wait: 'inf' is"),
        (["chat", "--worker", "a", "--channel", "c", "--wait", "nan"], "roster: chat: argument"),
        (
            [*bridge, "--line-interval", "inf"],
            "roster: bridge irc: argument --line-interval: 'inf'",
        ),
        ([*bridge, "--private-burst", "0"], "roster: bridge irc: argument --private-burst: '0' is"),
    ]
    for argv, start in cases:
        code, out, err = roster(*argv)
        assert (code, out) == (2, ""), argv
        assert err.startswith(start), (argv, err)
        assert err.count("\n") == 1, err
    code, out, _ = roster("--help")
    assert code == 0 and "server" in out


def test_the_bridge_states_its_own_defaults(cli: Cli) -> None:
    out = " ".join(cli.text("bridge", "irc", "--help").split())
    shown = dict(re.findall(r"(--[\w-]+) [A-Z]+ [^-]*?default: ([\d.]+)", out))
    for option, rate in (("line", SEND_RATE), ("private", PRIVATE_RATE), ("mention", MENTION_RATE)):
        assert float(shown[f"--{option}-burst"]) == rate.burst
        assert float(shown[f"--{option}-interval"]) == rate.interval_s
    config = {field.name: field.default for field in msgspec.structs.fields(BridgeConfig)}
    assert float(shown["--debounce"]) == config["debounce_s"]
    assert int(shown["--max-lines"]) == config["max_lines"]


def test_daemon_down_is_one_line_and_exit_1(tmp_path: Path) -> None:
    socket = tmp_path / "nobody.sock"
    for argv in (["status"], ["run", "--worker", "ada", "hi"], ["task", "list", "--json"]):
        code, out, err = _cli(*argv, "--socket", str(socket))
        assert (code, out) == (1, ""), argv
        assert err == (
            f"roster: cannot connect to rosterd at {socket}: No such file or directory; "
            "is the daemon running?\n"
        )
    code, _, err = _cli("chat", "--worker", "ada", "--channel", "general", env={
        "ROSTER_STATE": str(tmp_path), "ROSTER_SOCKET": "", "RUNTIME_DIRECTORY": ""
    })  # fmt: skip
    assert code == 1
    assert err.startswith(f"roster: cannot connect to rosterd at {tmp_path / 'rosterd.sock'}: ")
