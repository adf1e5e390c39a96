"""What ``roster`` prints to a terminal cannot take the terminal over.

Each test runs ``roster`` as a process with its stdout and stderr on a
pseudo-terminal, in raw mode so that the bytes read are the bytes roster
wrote: text a model or a peer wrote (a reply, a note, a transcript, a
compiled prompt, a provider's error) shows its control characters; the
same command into a pipe writes that text exactly.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
import tty
from collections.abc import Sequence
from pathlib import Path

import anyio.to_thread
import msgspec
import pytest
from engines_org import fallback_org
from harness import DaemonProcess
from simulator import Reply, Simulator, Status

from rosterd.cli._runs import render_context
from rosterd.protocol import TurnRequest

# Clears the screen, sets the clipboard (OSC 52), reverses what follows
# (RLO, then an isolate), moves the cursor up with the C1 CSI, backspaces, DEL.
HOSTILE = "\x1b[2J\x1b]52;c;aGk=\x07\u202eevil\u2066 \x9b1A\x08\x7f"
# As roster shows it on a terminal: C0 in caret notation, the rest as JSON escapes them.
SHOWN = r"^[[2J^[]52;c;aGk=^G\u202eevil\u2066 \u009b1A^H\u007f"
# What a terminal would obey: C0 but newline and tab, DEL, C1, bidi controls.
_OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def on_terminal(argv: Sequence[str], stdin: str = "") -> str:
    """What ``roster *argv*`` wrote to its terminal (stdout and stderr), once it exited 0."""
    leader, follower = os.openpty()
    tty.setraw(follower)  # no newline turned into CR LF: the bytes as written
    with subprocess.Popen(
        [sys.executable, "-m", "rosterd.cli", *argv],
        stdin=subprocess.PIPE,
        stdout=follower,
        stderr=follower,
    ) as process:
        os.close(follower)
        assert process.stdin is not None
        process.stdin.write(stdin.encode())
        process.stdin.close()
        written = _read_until_closed(leader, process)
        code = process.wait(timeout=60)
    os.close(leader)
    assert code == 0, written
    return written.decode()


def _read_until_closed(leader: int, process: subprocess.Popen[bytes]) -> bytes:
    """Everything written to the terminal until its last writer closed it."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + 60
    # The deadline only bounds a roster that never exits.
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([leader], [], [], left)
        if not readable:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO (Linux): every descriptor of the follower side is closed
            chunk = b""
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
    process.kill()
    raise AssertionError(f"roster did not exit; it wrote {b''.join(chunks)!r}")


def piped(argv: Sequence[str], stdin: str = "") -> bytes:
    """What ``roster *argv*`` wrote to a pipe on stdout, once it exited 0."""
    done = subprocess.run(
        [sys.executable, "-m", "rosterd.cli", *argv],
        input=stdin.encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def assert_shown(written: str) -> None:
    assert not _OBEYED.findall(written), written


@pytest.mark.parametrize("surface", ["run", "chat"])
def test_a_reply_shows_its_controls_on_a_terminal_and_pipes_them_exactly(
    daemon: DaemonProcess, surface: str
) -> None:
    socket = ["--socket", str(daemon.socket)]
    if surface == "run":
        argv, stdin = ["run", *socket, "--worker", "grace", HOSTILE], ""
    else:
        argv, stdin = ["chat", *socket, "--worker", "ada", "--channel", "general"], HOSTILE + "\n"

    written = on_terminal(argv, stdin)
    assert f"You said: {SHOWN}\n" in written
    assert_shown(written)

    assert piped(argv, stdin).decode().endswith(f"You said: {HOSTILE}\n")


@pytest.mark.parametrize(
    ("add", "show"),
    [
        (["memory", "add", "--worker", "ada"], ["memory", "list", "--worker", "ada"]),
        (["gate", "file", "--worker", "ada", "--channel", "general"], ["gate", "list"]),
    ],
    ids=["memory", "gate"],
)
def test_notes_and_gates_show_their_controls_on_a_terminal(
    daemon: DaemonProcess, add: list[str], show: list[str]
) -> None:
    socket = ["--socket", str(daemon.socket)]
    piped([*add, *socket, HOSTILE])

    written = on_terminal([*show, *socket])
    assert SHOWN in written
    assert_shown(written)
    assert HOSTILE in piped([*show, *socket]).decode()

    # JSON escapes every C0 control itself; on a terminal the rest are
    # escaped too, and it is still the same document.
    as_json = on_terminal([*show, *socket, "--json"])
    assert_shown(as_json)
    assert json.loads(as_json) == json.loads(piped([*show, *socket, "--json"]))


def test_runs_context_shows_a_reply_in_the_prompt_on_a_terminal_and_pipes_the_exact_bytes(
    daemon: DaemonProcess,
) -> None:
    # The second turn's prompt holds the first reply as the engine received it.
    chat = ["chat", "--socket", str(daemon.socket), "--worker", "ada", "--channel", "general"]
    piped(chat, f"{HOSTILE}\nagain\n")
    (session,) = json.loads(
        piped(["server", "runs", "list", "--state", str(daemon.state), "--json"])
    )
    context = ["server", "runs", "context", session["id"], "--state", str(daemon.state)]

    written = on_terminal(context)
    assert f"You said: {SHOWN}" in written
    assert_shown(written)
    # Piped, the very bytes the engine received.
    as_json = piped([*context, "--json"])
    exact = piped(context)
    assert exact == render_context(msgspec.json.decode(as_json, type=list[TurnRequest]))
    assert f"You said: {HOSTILE}".encode() in exact
    # The same document on a terminal, its controls escaped.
    on_json = on_terminal([*context, "--json"])
    assert_shown(on_json)
    assert json.loads(on_json) == json.loads(as_json)


@pytest.mark.long
@pytest.mark.anyio
async def test_a_provider_cannot_take_the_terminal_over_in_chat_or_runs_show(
    tmp_path: Path,
) -> None:
    async with Simulator() as primary, Simulator() as fallback:
        primary.script(Status(400, HOSTILE), Status(429, "Slow down", retry_after=3600))
        fallback.script(Reply(HOSTILE))
        org = fallback_org(tmp_path / "org", primary.anthropic_url, fallback.openai_url)
        daemon = DaemonProcess(org, tmp_path / "state")
        await anyio.to_thread.run_sync(daemon.start)
        try:
            argv = ["chat", "--socket", str(daemon.socket), "--worker", "w0", "--channel", "c0"]
            written = await anyio.to_thread.run_sync(on_terminal, argv, "first\nsecond\n")
        finally:
            await anyio.to_thread.run_sync(daemon.stop)

    # The first turn: the provider's error, quoted on stderr, is shown.
    refused = next(line for line in written.splitlines() if line.startswith("roster: "))
    assert refused == f"roster: anthropic: HTTP 400: {SHOWN} (api_error)"
    # The second: the status line is drawn and cleared with roster's own
    # controls, and the fallback's reply is shown.
    assert f"\r\x1b[2K[trying a fallback engine]\r\x1b[2K{SHOWN}\n" in written
    assert_shown(written.replace("\r\x1b[2K", ""))

    # The transcript keeps the error as the provider wrote it.
    session = written.split()[1]
    show = ["server", "runs", "show", session, "--state", str(daemon.state)]
    failure = f"turn 1 at .*: anthropic: HTTP 400: {re.escape(SHOWN)} \\(api_error\\)\n"
    shown = await anyio.to_thread.run_sync(on_terminal, show)
    assert re.search(failure, shown), shown
    assert_shown(shown)
    raw = (await anyio.to_thread.run_sync(piped, show)).decode()
    assert f"anthropic: HTTP 400: {HOSTILE} (api_error)\n" in raw
