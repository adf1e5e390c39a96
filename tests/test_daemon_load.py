"""Many concurrent clients, each in its own warm session, all answered right."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from harness import DaemonProcess
from orgs import write_org


@pytest.mark.long
@pytest.mark.anyio
async def test_200_concurrent_clients_all_get_correct_replies(tmp_path: Path) -> None:
    org = write_org(tmp_path / "org", workers=["ada"], channels=200)
    process = DaemonProcess(org, tmp_path / "state").start()
    replies: dict[int, list[str]] = {}
    try:

        async def client_session(n: int) -> None:
            async with await process.client() as client:
                opened = await client.session_open("ada", f"c{n}")
                texts = []
                for turn in range(1, 3):
                    result = await client.session_send(opened.session, f"client {n} turn {turn}")
                    assert result.turn == turn
                    texts.append(result.text)
                replies[n] = texts

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for n in range(200):
                    tg.start_soon(client_session, n)
        async with await process.client() as client:
            status = await client.daemon_status()
    finally:
        process.stop()
    assert len(replies) == 200
    for n, texts in replies.items():
        assert texts[0].endswith(f"You said: client {n} turn 1")
        assert texts[1].endswith(f"You said: client {n} turn 2")
        assert "transcript 3 messages" in texts[1]
    assert status.sessions == 200
