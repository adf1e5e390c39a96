"""kill -9 in the middle of a stream of turns loses no acknowledged turn."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import anyio
import msgspec
import pytest
from harness import DaemonProcess, process_client, set_daemon

from rosterd import RosterError
from rosterd.client import RosterClient
from rosterd.compiler import ChannelMessage
from rosterd.protocol import Delta, TranscriptEntry


def transcript(state: Path, session: str) -> list[TranscriptEntry]:
    path = state / "runs" / session / "transcript.jsonl"
    lines = path.read_bytes().splitlines()
    return [msgspec.json.decode(line, type=TranscriptEntry) for line in lines if line]


def tear_last_line(path: Path) -> None:
    """Leave half a record at the end, as a crash in the middle of a write does."""
    with open(path, "ab") as torn:
        torn.write(b'{"turn": 999, "role": "user", "cont')


async def killed_mid_stream(
    process: DaemonProcess, kill_at: tuple[int, int]
) -> tuple[str, list[tuple[int, str]]]:
    """Start *process*, open ada's session in general and send it turns
    until *process* is killed at *kill_at* (``turns_until_killed``): the
    session and the turns acknowledged before."""
    process.start()
    async with await process.client() as client:
        session = (await client.session_open("ada", "general")).session
        return session, await turns_until_killed(client, session, process, kill_at)


async def turns_until_killed(
    client: RosterClient, session: str, process: DaemonProcess, kill_at: tuple[int, int]
) -> list[tuple[int, str]]:
    """Send turns back to back and kill -9 the daemon inside the turn after
    *kill_at[0]* acknowledged ones, once *kill_at[1]* of its deltas arrived
    (after the last one, the daemon is recording the reply); the (turn, text)
    of every turn acknowledged. The rest of that turn may still have been
    sent before the signal landed: then it is acknowledged too."""
    turns, deltas = kill_at
    acknowledged: list[tuple[int, str]] = []
    seen = 0
    killed = False

    async def on_delta(delta: Delta) -> None:
        nonlocal seen, killed
        seen += 1
        if len(acknowledged) == turns and seen == deltas:
            process.kill9()
            killed = True

    while True:
        seen = 0
        text = f"turn text {len(acknowledged) + 1}"
        try:
            result = await client.session_send(session, text, on_delta=on_delta)
        except (RosterError, OSError):  # the daemon died under us: expected
            break
        acknowledged.append((result.turn, text))
        assert killed or len(acknowledged) <= turns, (
            "the reply had fewer deltas than the kill waited for"
        )
    assert killed and len(acknowledged) >= turns, "the daemon died before the kill"
    return acknowledged


def kill_point(seed: int) -> tuple[int, int]:
    """After how many turns, and at which delta of the next (an echo reply has three)."""
    rng = random.Random(seed)
    return rng.randint(5, 40), rng.randint(1, 3)


def assert_kept(entries: Sequence[TranscriptEntry], acknowledged: list[tuple[int, str]]) -> None:
    """Each acknowledged turn has its one user entry and its one reply."""
    for turn, text in acknowledged:
        user = [e for e in entries if e.turn == turn and e.role == "user"]
        reply = [e for e in entries if e.turn == turn and e.role == "assistant"]
        assert len(user) == 1 and text in user[0].content
        assert len(reply) == 1 and text in reply[0].content


@pytest.mark.anyio
@pytest.mark.parametrize("seed", [1, 2])
async def test_kill_9_mid_stream_keeps_every_acknowledged_turn(
    org_dir: Path, tmp_path: Path, seed: int
) -> None:
    state = tmp_path / "state"
    session, acknowledged = await killed_mid_stream(DaemonProcess(org_dir, state), kill_point(seed))
    assert_kept(transcript(state, session), acknowledged)

    tear_last_line(state / "runs" / session / "transcript.jsonl")
    async with process_client(org_dir, state) as (process, client):
        opened = await client.session_open("ada", "general")
        assert opened.session == session
        assert opened.turns >= len(acknowledged)
        result = await client.session_send(session, "after restart")
    assert result.turn == opened.turns + 1
    assert "dropped a torn last line" in process.log()
    assert all(e.turn != 999 for e in transcript(state, session))


@pytest.mark.anyio
async def test_a_second_daemon_on_the_same_state_is_refused(daemon: DaemonProcess) -> None:
    second = DaemonProcess(daemon.org, daemon.state, socket_path=daemon.state.parent / "other.sock")
    second.start(wait=False)
    assert second.process is not None
    assert second.process.wait(20) == 1
    assert "another rosterd is using this state directory" in second.log()
    async with await daemon.client() as client:
        status = await client.daemon_status()
    assert daemon.process is not None
    assert status.pid == daemon.process.pid


@pytest.mark.anyio
async def test_bad_org_fails_start_with_one_clear_line(org_dir: Path, tmp_path: Path) -> None:
    (org_dir / "org.toml").write_text("[workers.ada\n")
    process = DaemonProcess(org_dir, tmp_path / "state")
    process.start(wait=False)
    assert process.process is not None
    assert process.process.wait(20) == 1
    log = process.log()
    assert "invalid TOML" in log and "org.toml" in log
    assert "Traceback" not in log


@pytest.mark.anyio
async def test_kill_9_mid_stream_on_a_database_keeps_every_acknowledged_turn(
    org_dir: Path, tmp_path: Path, postgres_url: str
) -> None:
    set_daemon(org_dir, "lease_s = 1")
    first = DaemonProcess(org_dir, tmp_path / "a", database=postgres_url)
    session, acknowledged = await killed_mid_stream(first, kill_point(3))

    async with process_client(org_dir, tmp_path / "b", database=postgres_url) as (_, client):
        reopened = await client.session_open("ada", "general")
        assert reopened.session == session
        entries = (await client.runs_show(session)).transcript
        after = await client.session_send(session, "after")
    assert_kept(entries, acknowledged)
    assert after.turn == reopened.turns + 1


@pytest.mark.anyio
async def test_kill_9_among_turns_and_posts_sharing_writes_keeps_every_acknowledged_one(
    org_dir: Path, tmp_path: Path
) -> None:
    """Two workers' sessions and several posters race to one channel, whose
    log they share, so their appends share writes and fsyncs (group
    commit). Killed while some are in flight, the state holds every turn
    and post that was acknowledged, each whole and the channel in seq
    order, and nothing of a post that was not."""
    state = tmp_path / "state"
    process = DaemonProcess(org_dir, state).start()
    posted: dict[int, str] = {}
    sent: set[str] = set()
    turns: dict[str, list[tuple[int, str]]] = {}
    kill_after = 80

    def kill_once_all_went_on() -> None:
        """kill -9, right as a post is acknowledged, once there are enough
        and each session answered some (again: a no-op once it is gone)."""
        answered = [len(acknowledged) for acknowledged in turns.values()]
        if len(posted) >= kill_after and len(answered) == 2 and min(answered) >= 3:
            process.kill9()

    async def post(client: RosterClient, poster: int) -> None:
        for n in range(10_000):
            text = f"post {poster}.{n}"
            sent.add(text)
            try:
                message = await client.channel_post("general", "alice", text)
            except (RosterError, OSError):  # the daemon died under us: expected
                return
            posted[message.seq] = text
            kill_once_all_went_on()

    async def talk(client: RosterClient, worker: str) -> None:
        session = (await client.session_open(worker, "general")).session
        acknowledged = turns[session] = []
        for n in range(10_000):
            text = f"{worker} turn {n}"
            sent.add(text)
            try:
                result = await client.session_send(session, text)
            except (RosterError, OSError):
                return
            acknowledged.append((result.turn, text))

    clients = [await process.client() for _ in range(8)]
    async with anyio.create_task_group() as tg:
        for poster, client in enumerate(clients[:6]):
            tg.start_soon(post, client, poster)
        tg.start_soon(talk, clients[6], "ada")
        tg.start_soon(talk, clients[7], "grace")
    for client in clients:
        await client.aclose()
    assert len(posted) >= kill_after and all(turns.values())

    async with process_client(org_dir, state) as (_, client):
        after = await client.channel_post("general", "alice", "after restart")
    lines = (state / "channels" / "general.jsonl").read_bytes().splitlines()
    kept = [msgspec.json.decode(line, type=ChannelMessage) for line in lines]
    on_disk = {m.seq: m.text for m in kept}
    assert {seq: on_disk.get(seq) for seq in posted} == posted
    for session, acknowledged in turns.items():
        assert_kept(transcript(state, session), acknowledged)
        assert {text for _, text in acknowledged} <= set(on_disk.values())
    senders = {"alice", "operator", "ada", "grace"}
    assert all(m.sender in senders for m in kept) and kept[-1].seq == after.seq
    assert all(m.text in sent for m in kept if m.sender == "alice" and m is not kept[-1])
    assert [m.seq for m in kept] == sorted(on_disk) and len(on_disk) == len(kept)
