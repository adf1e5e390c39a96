"""``examples/bridge.py``, the frontend of docs/frontend.md, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
from harness import REPO, DaemonProcess

from rosterd.client import RosterClient

BRIDGE = REPO / "examples" / "bridge.py"


async def _close_the_session(socket: Path) -> str:
    async with await RosterClient.connect(socket) as client:
        opened = await client.session_open("ada", "general")
        await client.session_close(opened.session)
        return opened.session


def test_bridge_sends_as_each_speaker_and_reopens_an_ended_session(
    daemon: DaemonProcess,
) -> None:
    bridge = subprocess.Popen(
        [sys.executable, str(BRIDGE), "--socket", str(daemon.socket), "--from", "carol"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert bridge.stdin is not None and bridge.stderr is not None
    bridge.stdin.write("bob: is the build green?\n")
    bridge.stdin.flush()
    opened = bridge.stderr.readline()
    assert bridge.stderr.readline().endswith(" turn 1\n")
    # Another frontend closes the session between two lines of the room.
    closed = anyio.run(_close_the_session, daemon.socket)
    assert opened == f"# session {closed} (ada in #general)\n"
    bridge.stdin.write("no name here\n")
    out, err = bridge.communicate(timeout=60)

    assert bridge.returncode == 0, err
    first, second = out.splitlines()
    assert first.startswith("ada (to bob): [echo] turn 1:")
    assert first.endswith("You said: is the build green?")
    # A fresh session: its first turn, with the room so far as history.
    assert second.startswith("ada (to carol): [echo] turn 1:")
    assert "history x2" in second
    assert second.endswith("You said: no name here")
    reopened, last = err.splitlines()
    assert reopened.startswith("# session s-") and closed not in reopened
    assert last.endswith(" turn 1")


def test_bridge_follows_a_session_that_rolls_over(org_dir: Path, tmp_path: Path) -> None:
    toml = org_dir / "org.toml"
    # The first turn's request is ~2650 characters; the second passes this.
    toml.write_text(toml.read_text().replace("[context]\n", "[context]\nsession_chars = 2700\n"))
    daemon = DaemonProcess(org_dir, tmp_path / "state").start()
    try:
        done = subprocess.run(
            [sys.executable, str(BRIDGE), "--socket", str(daemon.socket)],
            input="bob: is the build green?\nalice: and the notes?\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        assert daemon.stop() == 0, daemon.log()

    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith("ada (to bob): [echo] turn 1:")
    # The new session answers the same message, with the room as history.
    assert second.startswith("ada (to alice): [echo] turn 1:")
    assert "history x2" in second
    opened, turn_1, rolled, turn_2 = done.stderr.splitlines()
    old = opened.split()[2]
    assert rolled.startswith(f"# session {old} rolled over to s-")
    new = rolled.split()[-1]
    assert new != old
    assert turn_1 == f"# run {old} turn 1"
    assert turn_2 == f"# run {new} turn 1"


def test_bridge_without_a_daemon_is_one_line_and_exit_1(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BRIDGE), "--socket", str(tmp_path / "nothing.sock")],
        input="bob: hello\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("bridge: cannot connect to rosterd at ")
    assert len(done.stderr.splitlines()) == 1
