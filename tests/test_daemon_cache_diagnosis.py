"""The provider's own account of a cache miss (Anthropic's cache diagnosis),
recorded beside rosterd's verdict and counted where the two disagree."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from harness import Cli, daemon_in_process
from orgs import simulated_engine, write_org
from provider_schemas import anthropic_errors
from simulator import Diagnose, Simulator

from rosterd.engines import CACHE_DIAGNOSIS_BETA
from rosterd.protocol import CacheDiagnosis, TranscriptEntry

pytestmark = pytest.mark.anyio


def _org(root: Path, sim: Simulator, diagnose: bool) -> Path:
    settings = f"diagnose_cache = {str(diagnose).lower()}"
    return write_org(root, engine=simulated_engine(sim, "anthropic", settings))


async def _session(org: Path, state: Path, turns: int, session: str | None = None) -> str:
    """*turns* turns of a w0 session in c0 (continuing *session*); its id."""
    async with daemon_in_process(org, state) as daemon, await daemon.client() as client:
        opened = await client.session_open("w0", "c0")
        assert session is None or opened.session == session
        for turn in range(turns):
            await client.session_send(opened.session, f"turn {turn}")
        return opened.session


def _answers(state: Path, run: str) -> list[TranscriptEntry]:
    lines = (state / "runs" / run / "transcript.jsonl").read_bytes().splitlines()
    entries = [msgspec.json.decode(line, type=TranscriptEntry) for line in lines]
    return [e for e in entries if e.role == "assistant"]


async def test_each_request_names_the_previous_reply_even_across_a_restart(
    tmp_path: Path,
) -> None:
    async with Simulator() as sim:
        org = _org(tmp_path / "org", sim, diagnose=True)
        run = await _session(org, tmp_path / "state", 2)
        await _session(org, tmp_path / "state", 1, session=run)
    assert all(anthropic_errors(r.body) == [] for r in sim.requests)
    bodies = [json.loads(r.body) for r in sim.requests]
    assert [b["diagnostics"] for b in bodies] == [
        {"previous_message_id": None},
        {"previous_message_id": "msg_sim_1"},
        {"previous_message_id": "msg_sim_2"},
    ]
    assert all(CACHE_DIAGNOSIS_BETA in r.headers["anthropic-beta"] for r in sim.requests)
    answers = _answers(tmp_path / "state", run)
    assert [e.provider_id for e in answers] == ["msg_sim_1", "msg_sim_2", "msg_sim_3"]
    # The prefix held: nothing missed, and the provider gives no reason.
    assert [e.cache.diagnosis for e in answers if e.cache] == [CacheDiagnosis()] * 3
    assert not any(e.cache and e.cache.disagrees for e in answers)


async def test_off_by_default_nothing_is_asked(tmp_path: Path) -> None:
    async with Simulator() as sim:
        org = _org(tmp_path / "org", sim, diagnose=False)
        run = await _session(org, tmp_path / "state", 2)
    assert all("diagnostics" not in json.loads(r.body) for r in sim.requests)
    assert all("anthropic-beta" not in r.headers for r in sim.requests)
    assert all(e.cache and e.cache.diagnosis is None for e in _answers(tmp_path / "state", run))


async def test_a_reason_is_recorded_and_a_contradiction_counted(tmp_path: Path, cli: Cli) -> None:
    state = tmp_path / "state"
    async with Simulator() as sim:
        org = _org(tmp_path / "org", sim, diagnose=True)
        # Turn 2: the provider says the system changed, though rosterd's hashes
        # say it held and the cache was read. Turn 3: its diagnosis is pending.
        # Turn 4: its previous reply is gone: no finding either way.
        sim.script(
            Diagnose(None),
            Diagnose("system_changed", 900),
            Diagnose(None),
            Diagnose("previous_message_not_found"),
        )
        run = await _session(org, state, 4)
    answers = _answers(state, run)
    checks = [e.cache for e in answers]
    assert all(c is not None for c in checks)
    assert [c.diagnosis for c in checks if c] == [
        CacheDiagnosis(),
        CacheDiagnosis("system_changed", 900),
        CacheDiagnosis(),
        CacheDiagnosis("previous_message_not_found"),
    ]
    assert [c.verdict for c in checks if c][1] == "hit"
    assert [c.disagrees for c in checks if c] == [False, True, False, False]

    shown = await cli.in_thread("server", "runs", "show", run, "--state", str(state))
    assert (
        "turn 2: the provider says system_changed (900 tokens missed); "
        "DISAGREES with rosterd's verdict hit"
    ) in shown
    assert "turn 4: the provider says previous_message_not_found" in shown
    assert "provider cache diagnosis on 4 call(s), 2 without a reason" in shown

    stats = await cli.in_thread("server", "stats", "cache", "--state", str(state), "--json")
    counted = json.loads(stats)
    assert counted["disagreements"] == 1
    assert counted["provider_reasons"] == {
        "none given": 2,
        "previous_message_not_found": 1,
        "system_changed": 1,
    }
    text = await cli.in_thread("server", "stats", "cache", "--state", str(state))
    assert "provider and rosterd disagree: 1" in text


async def test_an_unknown_reason_is_kept_as_unavailable_and_reported(tmp_path: Path) -> None:
    async with Simulator() as sim:
        org = _org(tmp_path / "org", sim, diagnose=True)
        sim.script(Diagnose("cosmic_rays"))
        async with (
            daemon_in_process(org, tmp_path / "state") as daemon,
            await daemon.client() as client,
        ):
            opened = await client.session_open("w0", "c0")
            result = await client.session_send(opened.session, "hello")
            log = daemon.log()
    assert result.text
    (answer,) = _answers(tmp_path / "state", opened.session)
    assert answer.cache is not None
    assert answer.cache.diagnosis == CacheDiagnosis("unavailable")
    assert "unknown cache_miss_reason 'cosmic_rays'" in log
