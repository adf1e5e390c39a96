"""kill -9 at seeded random points over 300 turns; SIGTERM under 50 in-flight turns.

Four clients mix session turns, memory, gates and tasks against one daemon;
when the acknowledged-turn count reaches a random target the daemon gets
SIGKILL with the other clients' requests in flight. Every write whose reply
arrived is recorded, and after every restart all of them must be there.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import anyio.to_thread
import msgspec
import pytest
from harness import DaemonProcess, opened_session, set_daemon
from orgs import simulated_engine, write_org
from simulator import Delay, Simulator, Stall

from rosterd import RosterError
from rosterd.client import RosterClient, RpcError
from rosterd.protocol import Call, RunDirect, SessionSend, TaskGet, TurnResult

pytestmark = pytest.mark.anyio

SEED = 20261202
TURNS = 300
PAIRS = [("ada", "general"), ("ada", "releases"), ("grace", "general"), ("ada", "general")]
OPS = ["turn", "memory", "gate", "resolve", "task"]
WEIGHTS = [60, 12, 10, 6, 12]


class Ledger:
    """Every write the daemon acknowledged, by kind."""

    def __init__(self) -> None:
        self.sessions: dict[tuple[str, str], str] = {}
        self.turns: dict[str, dict[int, str]] = {}
        self.memory: dict[str, set[str]] = {"ada": set(), "grace": set()}
        self.gates: dict[str, str] = {}
        self.resolved: dict[str, str] = {}
        self.tasks: dict[str, str] = {}

    @property
    def turn_count(self) -> int:
        return sum(len(turns) for turns in self.turns.values())


def jsonl_problems(state: Path, *, killed: bool) -> list[str]:
    """Lines that do not parse; after a kill only a file's last line may be torn."""
    problems = []
    for path in sorted(state.rglob("*.jsonl")):
        data = path.read_bytes()
        lines = data.split(b"\n")
        for n, line in enumerate(lines):
            last = n == len(lines) - 1
            if last and line == b"":
                continue
            try:
                msgspec.json.decode(line)
                if last:
                    raise msgspec.DecodeError("no newline at the end")
            except msgspec.DecodeError as exc:
                if not (killed and last):
                    problems.append(f"{path.relative_to(state)} line {n + 1}: {exc}")
    for path in sorted(state.rglob("*.json")):
        try:
            msgspec.json.decode(path.read_bytes())
        except msgspec.DecodeError as exc:
            problems.append(f"{path.relative_to(state)}: {exc}")
    return problems


def torn_tails(state: Path) -> int:
    return sum(
        1 for p in state.rglob("*.jsonl") if p.stat().st_size and not p.read_bytes().endswith(b"\n")
    )


def tear_one(state: Path, ledger: Ledger, rng: random.Random) -> None:
    """Cut a record in half at the end of one log, as a write cut short by a crash does.

    Only logs the daemon reopens on restart or on the reads in ``verify``: the
    stores, memory, and session transcripts and traces.
    """
    logs = [state / "gates.jsonl", state / "tasks.jsonl", *sorted(state.glob("memory/*.jsonl"))]
    for session in sorted(set(ledger.sessions.values())):
        run = state / "runs" / session
        logs += [run / "transcript.jsonl", run / "context.jsonl"]
    with open(rng.choice([p for p in logs if p.exists()]), "ab") as torn:
        torn.write(b'{"id": "torn", "turn": 1, "text": "cut sh')


async def verify(client: RosterClient, ledger: Ledger) -> None:
    """Every acknowledged write is readable through the daemon."""
    for (worker, channel), session in ledger.sessions.items():
        opened = await client.session_open(worker, channel)
        assert opened.session == session, "a restart must resume, not replace, the session"
    for session, turns in ledger.turns.items():
        shown = await client.runs_show(session)
        entries = shown.transcript
        for turn, text in turns.items():
            users = [e for e in entries if e.turn == turn and e.role == "user"]
            replies = [e for e in entries if e.turn == turn and e.role == "assistant"]
            assert len(users) == 1 and f'"text":"{text}"' in users[0].content, (session, turn)
            assert len(replies) == 1 and replies[0].content.endswith(f"You said: {text}")
    for worker, texts in ledger.memory.items():
        items = await client.memory_list(worker)
        assert texts <= {item.text for item in items}
    gates = {g.id: g for g in await client.gate_list()}
    for gate, summary in ledger.gates.items():
        assert gates[gate].summary == summary
    for gate, outcome in ledger.resolved.items():
        assert (gates[gate].status, gates[gate].outcome) == ("resolved", outcome)
    for task, text in ledger.tasks.items():
        assert (await client.task_get(task)).text == text


async def workload(
    hosts: Sequence[DaemonProcess],
    ledger: Ledger,
    rng: random.Random,
    round_no: int,
    kill_at: int,
) -> DaemonProcess:
    """Four clients until *kill_at* turns are acknowledged, then SIGKILL of one
    host mid-flight; the host killed. With several hosts each client sends
    its operations to them in turn."""
    killed = anyio.Event()
    victim = rng.choice(hosts)

    async def client_loop(k: int, seed: int) -> None:
        local = random.Random(seed)
        worker, channel = PAIRS[k]
        n = 0
        try:
            async with AsyncExitStack() as stack:
                clients = [await stack.enter_async_context(await h.client()) for h in hosts]
                opened = await clients[0].session_open(worker, channel)
                session = ledger.sessions.setdefault((worker, channel), opened.session)
                assert opened.session == session
                while not killed.is_set():
                    n += 1
                    text = f"r{round_no}-c{k}-n{n}"
                    client = clients[(k + n) % len(clients)]
                    await one_op(client, local.choices(OPS, WEIGHTS)[0], worker, session, text)
                    if ledger.turn_count >= kill_at and not killed.is_set():
                        victim.kill9()
                        killed.set()
        except (RosterError, OSError):  # the daemon died under us: expected
            if not killed.is_set():
                raise

    async def one_op(client: RosterClient, op: str, worker: str, session: str, text: str) -> None:
        match op:
            case "turn":
                result = await client.session_send(session, text)
                if result.rolled_from is not None:
                    # Memory grows every turn's input: a long round can pass
                    # session_chars, and the pair continues in a new session.
                    pair = next(p for p, s in ledger.sessions.items() if s == result.rolled_from)
                    ledger.sessions[pair] = result.run
                turns = ledger.turns.setdefault(result.run, {})
                assert result.turn not in turns, "a turn number was reused"
                turns[result.turn] = text
            case "memory":
                await client.memory_add(worker, text)
                ledger.memory[worker].add(text)
            case "gate":
                gate = await client.gate_file(worker, text)
                ledger.gates[gate.id] = text
            case "resolve":
                open_gates = sorted(set(ledger.gates) - set(ledger.resolved))
                if open_gates:
                    gate_id = rng.choice(open_gates)
                    try:
                        await client.gate_resolve(gate_id, text)
                    except RpcError as exc:  # another client resolved it first
                        assert "already resolved" in str(exc)
                    else:
                        ledger.resolved[gate_id] = text
            case "task":
                channel = "releases" if worker == "ada" else "general"
                task = await client.task_submit(worker, channel, text)
                ledger.tasks[task.id] = text

    async with anyio.create_task_group() as tg:
        for k in range(len(PAIRS)):
            tg.start_soon(client_loop, k, rng.getrandbits(32))
    return victim


@pytest.mark.long
async def test_kill_9_at_random_points_loses_no_acknowledged_write(
    org_dir: Path, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    ledger = Ledger()
    state = tmp_path / "state"
    rounds = torn = 0
    while ledger.turn_count < TURNS:
        process = DaemonProcess(org_dir, state).start()  # raises if a restart fails
        async with await process.client() as client:
            await verify(client, ledger)
        assert jsonl_problems(state, killed=False) == [], "recovery left a torn line"
        kill_at = min(TURNS, ledger.turn_count + rng.randint(10, 50))
        await workload([process], ledger, rng, rounds, kill_at)
        assert jsonl_problems(state, killed=True) == []
        torn += torn_tails(state)
        tear_one(state, ledger, rng)
        rounds += 1

    process = DaemonProcess(org_dir, state).start()
    try:
        async with await process.client() as client:
            await verify(client, ledger)
            # Tasks cut off by a kill run again after the restart: each answers once done.
            states = [await client.request(TaskGet(t, wait=30)) for t in ledger.tasks]
            assert [s.status for s in states] == ["done"] * len(states), states
        assert jsonl_problems(state, killed=False) == []
    finally:
        code = process.stop()
    print(
        f"\nkill -9: {rounds} kills, {ledger.turn_count} acknowledged turns, "
        f"{sum(map(len, ledger.memory.values()))} memory items, {len(ledger.gates)} gates "
        f"({len(ledger.resolved)} resolved), {len(ledger.tasks)} tasks; 0 lost; "
        f"{torn} torn tails left by the kills themselves, {rounds} more torn by the test, "
        "all dropped on recovery"
    )
    assert code == 0
    assert rounds >= 5
    assert process.log().count("dropped a torn last line") >= rounds


@pytest.mark.long
async def test_kill_9_across_two_hosts_on_one_database_loses_no_acknowledged_write(
    org_dir: Path, tmp_path: Path, postgres_url: str
) -> None:
    """The same workload sent to two daemons on one PostgreSQL database in
    turn; at each random point one of them is killed, the other serves on."""
    set_daemon(org_dir, "lease_s = 1")
    rng = random.Random(SEED + 1)
    ledger = Ledger()
    hosts = [
        DaemonProcess(org_dir, tmp_path / name, database=postgres_url).start() for name in "ab"
    ]
    rounds = 0
    try:
        while ledger.turn_count < TURNS:
            for host in hosts:
                async with await host.client() as client:
                    await verify(client, ledger)
            kill_at = min(TURNS, ledger.turn_count + rng.randint(10, 50))
            victim = await workload(hosts, ledger, rng, rounds, kill_at)
            hosts[hosts.index(victim)] = DaemonProcess(
                org_dir, victim.state, database=postgres_url
            ).start()
            rounds += 1
        async with await hosts[0].client() as client:
            await verify(client, ledger)
            # Tasks cut off by a kill run again once their lease ran out: each
            # answers once done, on whichever host ran it.
            states = [await client.request(TaskGet(t, wait=60)) for t in ledger.tasks]
            assert [s.status for s in states] == ["done"] * len(states), states
            runs = await client.runs_list()
    finally:
        codes = [host.stop() for host in hosts]
    print(
        f"\nkill -9 across two hosts: {rounds} kills, {ledger.turn_count} acknowledged turns, "
        f"{len(ledger.tasks)} tasks, runs by {len({r.host for r in runs})} daemons; 0 lost"
    )
    assert codes == [0, 0]
    assert rounds >= 5


async def test_sigterm_drains_50_in_flight_turns(tmp_path: Path, simulator: Simulator) -> None:
    org = write_org(
        tmp_path / "org", workers=["ada"], channels=50, engine=simulated_engine(simulator)
    )
    process = DaemonProcess(org, tmp_path / "state").start()
    simulator.script(*[Delay(1.5)] * 50)
    results: dict[int, TurnResult] = {}

    async def one_turn(n: int) -> None:
        async with await process.client() as client:
            opened = await client.session_open("ada", f"c{n}")
            results[n] = await client.session_send(opened.session, f"in flight {n}")

    async with anyio.create_task_group() as tg:
        for n in range(50):
            tg.start_soon(one_turn, n)
        with anyio.fail_after(20):
            await simulator.wait_for_requests(50)
        assert process.process is not None
        process.process.send_signal(signal.SIGTERM)
        await anyio.to_thread.run_sync(process.wait_notified, b"STOPPING=1")
        with pytest.raises(RosterError):  # draining: no new connections
            async with await process.client() as late:
                await late.daemon_status()
    assert await anyio.to_thread.run_sync(process.wait, 30) == 0
    assert sorted(results) == list(range(50))
    for n, result in results.items():
        assert result.turn == 1
        roles = [
            msgspec.json.decode(line)["role"]
            for line in (process.state / "runs" / result.run / "transcript.jsonl")
            .read_bytes()
            .splitlines()
        ]
        assert roles == ["user", "assistant"], n
    assert "drain cut short" not in process.log()


def _roles(state: Path, run: str) -> list[str]:
    lines = (state / "runs" / run / "transcript.jsonl").read_bytes().splitlines()
    return [msgspec.json.decode(line)["role"] for line in lines]


async def test_drain_that_runs_out_answers_in_flight_turns_with_1010_and_records_them(
    tmp_path: Path, simulator: Simulator
) -> None:
    engine = simulated_engine(simulator)
    drain = "[daemon]\ndrain_s = 0.5"
    org = write_org(tmp_path / "org", workers=["ada"], channels=2, engine=engine, sections=drain)
    process = DaemonProcess(org, tmp_path / "state").start()
    simulator.script(*[Stall()] * 4)  # a provider that never answers
    errors: dict[str, RpcError] = {}
    sessions: dict[str, str] = {}

    async def turn(name: str, text: str) -> None:
        """A turn the stop cuts short: in a session on channel *name*, or direct."""
        async with await process.client() as client:
            params: Call[TurnResult] = RunDirect("ada", text=text)
            if name != "direct":
                opened = await client.session_open("ada", name)
                sessions[name] = opened.session
                params = SessionSend(opened.session, text=text)
            with pytest.raises(RpcError) as caught:
                await client.request(params)
            errors[name] = caught.value

    async with await process.client() as client:
        task = await client.task_submit("ada", "c0", "t")
    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "c0", "first")
        tg.start_soon(turn, "c1", "other")
        tg.start_soon(turn, "direct", "hi")
        with anyio.fail_after(20):
            await simulator.wait_for_requests(4)
        assert process.process is not None
        process.process.send_signal(signal.SIGTERM)
    assert await anyio.to_thread.run_sync(process.wait, 20) == 0
    assert "drain cut short; interrupting 4 engine calls" in process.log()
    assert {name: e.code for name, e in errors.items()} == {"c0": 1010, "c1": 1010, "direct": 1010}
    assert "shutting down" in errors["c0"].message
    for session in sessions.values():
        assert _roles(process.state, session) == ["user", "error"]
    runs = {
        info["surface"]: info
        for info in (
            msgspec.json.decode(p.read_bytes()) for p in process.state.glob("runs/*/run.json")
        )
        if info["surface"] != "session"
    }
    for surface in ("direct", "task"):
        assert runs[surface]["status"] == "interrupted", surface
        assert "shutting down" in runs[surface]["error"]
        assert _roles(process.state, runs[surface]["id"]) == ["user", "error"]

    process.start()  # the provider answers again
    try:
        async with await process.client() as client:
            opened = await client.session_open("ada", "c0")
            assert (opened.session, opened.turns) == (sessions["c0"], 1)
            result = await client.session_send(sessions["c0"], "again")
            assert result.turn == 2
            # The task queued again by the stop runs after the restart.
            assert (await client.request(TaskGet(task.id, wait=20))).status == "done"
    finally:
        assert process.stop() == 0
    assert _roles(process.state, sessions["c0"]) == ["user", "error", "user", "assistant"]
    # The resumed request extends the interrupted one: its user turn is sent, the error never.
    sent = [msgspec.json.decode(body)["messages"] for body in simulator.bodies()]
    resumed = next(m for m in sent if any("again" in x["content"] for x in m))
    assert [m["role"] for m in resumed] == ["system", "user", "user"]
    assert "first" in resumed[1]["content"]


async def test_a_second_sigterm_stops_at_once_without_waiting_for_the_drain(
    tmp_path: Path, simulator: Simulator
) -> None:
    engine = simulated_engine(simulator)
    org = write_org(
        tmp_path / "org", workers=["ada"], engine=engine, sections="[daemon]\ndrain_s = 60"
    )
    process = DaemonProcess(org, tmp_path / "state").start()
    simulator.script(Stall())
    daemon = process.process
    assert daemon is not None

    async def stalled_turn() -> None:
        async with await process.client() as client:
            # No waiting means no reply either: that is what the second signal asks.
            with pytest.raises(RosterError, match="closed the connection"):
                await client.run_direct("ada", "hi")

    async with anyio.create_task_group() as tg:
        tg.start_soon(stalled_turn)
        with anyio.fail_after(20):
            await simulator.wait_for_requests(1)
            daemon.send_signal(signal.SIGTERM)
            await anyio.to_thread.run_sync(process.wait_notified, b"STOPPING=1")
        daemon.send_signal(signal.SIGTERM)
        assert await anyio.to_thread.run_sync(process.wait, 10) == 0
    assert "SIGTERM again: stopping without waiting" in process.log()
    assert "drain cut short" not in process.log()


async def test_recovery_marks_cut_off_runs_interrupted_trims_torn_tails_and_removes_tmp_files(
    daemon: DaemonProcess,
) -> None:
    async with opened_session(daemon) as (client, session):
        direct = (await client.run_direct("ada", "hi")).run
        finished = (await client.run_direct("ada", "bye")).run
        await client.session_send(session, "hello")
    daemon.kill9()
    runs = daemon.state / "runs"
    # What kill -9 leaves: a run still `open`, a torn last line, an orphan temporary.
    info = msgspec.json.decode((runs / direct / "run.json").read_bytes())
    (runs / direct / "run.json").write_bytes(msgspec.json.encode({**info, "status": "open"}))
    transcript = runs / finished / "transcript.jsonl"
    transcript.write_bytes(transcript.read_bytes() + b'{"turn": 2, "role": "user", "cont')
    orphan = runs / finished / ".run.json.0badf00d.tmp"
    orphan.write_bytes(b'{"id": "half')
    daemon.start()
    async with await daemon.client() as client:
        listed = {r.id: r.status for r in await client.runs_list()}
    assert listed[direct] == "interrupted"
    assert listed[finished] == "done"
    assert listed[session] == "open"
    assert (runs / finished / "transcript.jsonl").read_bytes().endswith(b"\n")
    assert not orphan.exists()
    assert jsonl_problems(daemon.state, killed=False) == []


async def test_files_the_daemon_did_not_write_beside_its_own_are_left_alone(
    daemon: DaemonProcess,
) -> None:
    async with opened_session(daemon) as (client, session):
        await client.session_send(session, "hello")
    daemon.stop()
    state = daemon.state
    strays = [
        state / "runs" / ".notes.swp",
        state / "runs" / "README",
        state / "channels" / ".general.jsonl.swp",
        state / "sessions" / "ada" / ".general.json.swp",
    ]
    for stray in strays:
        stray.write_bytes(b"not the daemon's")
    (state / "runs" / "scratch").mkdir()
    (state / "sessions" / "ada" / "old.json").mkdir()
    daemon.start()
    async with await daemon.client() as client:
        listed = [r.id for r in await client.runs_list()]
        reopened = await client.session_open("ada", "general")
    assert listed == [session]
    assert reopened.session == session
    assert all(stray.exists() for stray in strays)


async def test_a_successor_a_kill_left_before_the_old_session_ended_is_ended_failed(
    org_dir: Path, tmp_path: Path
) -> None:
    toml = org_dir / "org.toml"
    toml.write_text(toml.read_text().replace("[context]\n", "[context]\nsession_chars = 50000\n"))
    daemon = DaemonProcess(org_dir, tmp_path / "state")
    runs, pointer = daemon.state / "runs", daemon.state / "sessions" / "ada" / "general.json"
    with daemon.start():
        async with opened_session(daemon) as (client, old):
            await client.session_send(old, "a" * 20_000)
            await client.session_send(old, "b" * 20_000)
            old_info, old_pointer = (runs / old / "run.json").read_bytes(), pointer.read_bytes()
            new = (await client.session_send(old, "c" * 20_000)).run
    # What kill -9 leaves between the successor's start and the old
    # session's end: the successor open with its system trace only, the old
    # session open and the pair's pointer still on it.
    (runs / old / "run.json").write_bytes(old_info)
    pointer.write_bytes(old_pointer)
    (runs / new / "transcript.jsonl").write_bytes(b"")
    context = runs / new / "context.jsonl"
    context.write_bytes(context.read_bytes().split(b"\n")[0] + b"\n")
    channel = daemon.state / "channels" / "general.jsonl"
    lines = channel.read_bytes().splitlines(keepends=True)
    channel.write_bytes(b"".join(line for line in lines if new.encode() not in line))
    with daemon.start():
        async with await daemon.client() as client:
            statuses = {r.id: r.status for r in await client.runs_list()}
            after = await client.session_send(old, "after")
            (successor,) = [r for r in await client.runs_list() if r.id == new]
    assert new != old
    assert statuses == {old: "open", new: "failed"}
    assert (after.run, after.turn) == (old, 3)
    assert successor.ended_at is not None
    assert "no pair leads to it" in (successor.error or "")
