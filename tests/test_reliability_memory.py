"""Memory notes of many distinct words: ranking costs what the turn reads, and
the worker's index stays small, however many words its notes hold."""

from __future__ import annotations

import random
import statistics
import string
import time
from pathlib import Path

import msgspec
import pytest
from harness import DaemonProcess

from rosterd.client import RosterClient
from rosterd.compiler import ChannelMessage

NOTES = 10
WORDS_PER_NOTE = 7_000  # 8 letters and a space each: 63,000 characters, under the note limit


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS line")


async def turn_seconds(client: RosterClient, session: str, text: str, turns: int) -> list[float]:
    took = []
    for _ in range(turns):
        start = time.perf_counter()
        await client.session_send(session, text)
        took.append(time.perf_counter() - start)
    return took


@pytest.mark.anyio
async def test_seventy_thousand_distinct_words_keep_rss_and_turn_time_bounded(
    daemon: DaemonProcess,
) -> None:
    assert daemon.process is not None
    pid = daemon.process.pid
    rng = random.Random(11)
    notes = [
        ["".join(rng.choices(string.ascii_lowercase, k=8)) for _ in range(WORDS_PER_NOTE)]
        for _ in range(NOTES)
    ]
    # Each turn's message shares words with every big note, so ranking reads them all.
    message = "what about " + " ".join(words[n] for words in notes for n in range(3))
    async with await daemon.client() as client:
        await client.memory_add("ada", "the pager rota is on the wiki")
        opened = await client.session_open("ada", "general")
        session = opened.session
        small = await turn_seconds(client, session, message, 6)
        rss_before = rss_kib(pid)
        for words in notes:
            await client.memory_add("ada", " ".join(words))
        big = await turn_seconds(client, session, message, 6)
        rss_after = rss_kib(pid)
    distinct = {word for words in notes for word in words}
    assert len(distinct) > 69_000
    assert sum(len(" ".join(words)) for words in notes) > 600 * 1024
    # The bit-per-word ranking this replaces grew RSS by 322 MiB for one
    # such note and blocked every later turn for about a second.
    grew = rss_after - rss_before
    assert grew < 64 * 1024, f"RSS grew {grew} KiB"
    # The first turns after the notes are the ones that index nothing new:
    # ranking reads the message's words only. A ratio, never an absolute time.
    ratio = statistics.median(big[1:]) / statistics.median(small[1:])
    assert ratio < 10, f"turns took {ratio:.1f}x as long with the big notes"


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM line")


@pytest.mark.anyio
async def test_a_long_channel_log_is_read_from_its_tail_only(org_dir: Path, tmp_path: Path) -> None:
    # 100,000 posts of 1 KB, as months of a busy channel leave its log, with
    # a torn last line: the first use after a start costs what the channel's
    # tail holds, not the whole log in memory.
    state = tmp_path / "state"
    log = state / "channels" / "general.jsonl"
    log.parent.mkdir(parents=True)
    text = "x" * 1000
    log.write_bytes(
        b"".join(
            msgspec.json.encode(ChannelMessage(seq=n, sender="bo", text=f"{n} {text}", at=n))
            + b"\n"
            for n in range(1, 100_001)
        )
        + b'{"seq": 100001, "sender": "bo", "te'
    )
    with DaemonProcess(org_dir, state).start() as daemon:
        assert daemon.process is not None
        before = peak_rss_kib(daemon.process.pid)
        async with await daemon.client() as client:
            await client.session_open("ada", "general")
            posted = await client.channel_post("general", "bo", "after")
        grew = peak_rss_kib(daemon.process.pid) - before
    assert posted.seq == 100_001
    assert log.read_bytes().endswith(msgspec.json.encode(posted) + b"\n")
    assert grew < 32 * 1024, f"the first use of the channel took {grew} KiB"
