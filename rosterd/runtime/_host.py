"""The host: what every surface shares, and the one path a turn takes.

Task runs, direct runs and session turns all go through ``run_turn``:
compile, write the trace (fsync), record the user turn, call the engine,
record the reply. While the reply calls tools, the turn goes on in steps:
the calls are answered (validated, then forwarded to the gateway, or filing
a gate, or writing or retiring a note), the results traced and recorded,
and the engine called again with the request extended by the reply and its
results, up to ``[gateway] max_steps`` engine calls. Nothing reaches an
engine that was not traced first.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import anyio
import anyio.to_thread
import msgspec
from anyio.abc import AsyncResource

from .._clock import SYSTEM_CLOCK, Clock
from .._errors import ConfigError, EngineError, RosterError, ShutdownError
from .._together import together
from ..compiler import (
    BoundaryCheck,
    Compilation,
    CompileError,
    ContextRecord,
    NoteTrace,
    PrefixState,
    RolloverTrace,
    RunMeta,
    SystemPrompt,
    ToolResult,
    TurnInput,
    carried_step,
    check_prefix,
    compile_step,
    notes_written,
    prefix_state,
)
from ..engines import (
    Admission,
    DeltaSink,
    Engine,
    EngineReply,
    EngineRequest,
    WaitSink,
    open_engine,
)
from ..observe import NO_TELEMETRY, OutcomeLabel, Telemetry, TurnWatch
from ..org import EngineConfig, NamedEngine, Org, OrgSource, Surface, WorkerConfig
from ..pricing import Pricing
from ..protocol import (
    CacheCheck,
    ChatMessage,
    EngineStatus,
    RunInfo,
    RunStatus,
    TranscriptEntry,
    Usage,
)
from ..stores import ActiveRun, State
from ._cache import judge_cache, with_diagnosis
from ._calls import TurnTools
from ._gateway import Gateway
from ._leases import LeaseKeeper
from ._lifetime import CachePlan

log = logging.getLogger("rosterd.sessions")

# A compilation is pure and most take well under a thread hop's cost (about
# 0.1 ms here), so it runs on the event loop. Ranking a message whose words
# many notes share can take longer: once a worker's compilation took more
# than this, its next one runs in a thread, so no other client waits
# through it. A thread holds the GIL for up to the interpreter's switch
# interval at a time anyway, so a compilation shorter than that keeps the
# loop waiting no longer on it than in a thread, and saves the hop.
ON_LOOP_S = sys.getswitchinterval()


class TurnOutcome(msgspec.Struct, frozen=True):
    """What a caller learns of a finished turn."""

    run: str
    turn: int
    reply: EngineReply
    record: ContextRecord
    # The session this turn's session rolled over from, when it just did.
    rolled_from: str | None = None
    # Engine calls the turn took: more than one when the model called tools.
    steps: int = 1


class CarriedSteps(msgspec.Struct, frozen=True):
    """The tool steps a turn made in a session refused as too long at a
    later step: its replies with calls, each followed by the results, as
    that session's transcript holds them. The session that takes the turn
    over sends them again with its first request, so the model sees the
    calls ran, and never makes them again itself."""

    rollover: RolloverTrace
    messages: tuple[ChatMessage, ...]

    def steps(self) -> list[tuple[ChatMessage, list[ChatMessage]]]:
        """Each reply with calls, and the tool messages answering them."""
        steps: list[tuple[ChatMessage, list[ChatMessage]]] = []
        for message in self.messages:
            if message.role == "assistant":
                steps.append((message, []))
            else:
                steps[-1][1].append(message)
        return steps


class Host(AsyncResource):
    """Org source, stores, runs and engines of one daemon."""

    def __init__(
        self,
        org_source: OrgSource,
        stores: State,
        env: Mapping[str, str],
        clock: Clock = SYSTEM_CLOCK,
        telemetry: Telemetry = NO_TELEMETRY,
    ) -> None:
        self.org_source = org_source
        self.telemetry = telemetry
        self.stores = stores
        # Names this daemon in the leases it takes on sessions and tasks.
        self.leases = LeaseKeeper(
            stores,
            f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}",
            clock,
            lambda: self.org.daemon.lease_s,
        )
        self.runs = stores.runs
        self.prefixes = stores.prefixes
        self.clock = clock
        self._env = env
        self._engines: dict[EngineConfig, Engine] = {}
        self._admissions: dict[EngineConfig, Admission] = {}
        self.pricing = Pricing()
        # Engine calls in flight, so a stop that cannot wait can cut them short.
        self._calls: set[anyio.CancelScope] = set()
        self._interrupted = False
        # Per worker, whether its last compilation took longer than
        # ON_LOOP_S: its next one runs off the event loop.
        self._slow_compiles: dict[str, bool] = {}

    def __repr__(self) -> str:
        return f"Host({self.stores!r}, {len(self._engines)} engines)"

    @property
    def org(self) -> Org:
        """The last good configuration; only new sessions and runs see a reload."""
        return self.org_source.current()

    @property
    def look_again_s(self) -> float:
        """How often this host looks at the store for what other hosts
        sharing it changed: a fraction of a lease, at most a second."""
        return min(1.0, self.org.daemon.lease_s / 4)

    @property
    def calls_in_flight(self) -> int:
        return len(self._calls)

    def interrupt(self) -> None:
        """Cut every engine call short, now and from now on (the drain ran out).

        Each cut turn records an ``error`` entry and raises ``ShutdownError``,
        so its client gets a reply and a resumed session stays consistent.
        """
        self._interrupted = True
        for scope in self._calls:
            scope.cancel()

    def new_run(
        self,
        run_id: str,
        surface: Surface,
        worker: str,
        channel: str | None,
        now: float,
        **details: str | None,
    ) -> RunInfo:
        """The info of a new run of *surface*, named as this daemon's
        (``RunInfo.host``): what ``run`` starts, or a session creates."""
        info = RunInfo(
            id=run_id,
            surface=surface.value,
            worker=worker,
            channel=channel,
            created_at=now,
            host=self.leases.holder,
        )
        return msgspec.structs.replace(info, **details)

    @asynccontextmanager
    async def run(self, info: RunInfo) -> AsyncIterator[ActiveRun]:
        """A task or direct run for the block: created, and leased by this
        host while it goes on; ``done`` when the block ends, ``interrupted``
        when the stop cut it short and ``failed`` on any other error, which
        goes on up. A session's run outlives any one block: it is created
        when the session opens and ended when it closes, expires or rolls
        over, and each of its turns holds the lease."""
        async with self.leases.run(info.id):
            run = await self.runs.create(info)
            try:
                yield run
            except Exception as exc:
                status: RunStatus = "interrupted" if isinstance(exc, ShutdownError) else "failed"
                await run.finish(status, self.clock(), error=failure_text(exc))
                raise
            await run.finish("done", self.clock())

    def engine(self, config: EngineConfig) -> Engine:
        engine = self._engines.get(config)
        if engine is None:
            observe = self.admission(config).observe
            engine = self._engines[config] = open_engine(config, self._env, observe)
        return engine

    def admission(self, config: EngineConfig) -> Admission:
        """The limits and breaker of the engine *config* describes."""
        admission = self._admissions.get(config)
        if admission is None:
            admission = self._admissions[config] = Admission(config)
        return admission

    def engine_status(self) -> list[EngineStatus]:
        """The org's engines, each with its breaker and queue, for ``daemon.status``."""
        named = self.org.named_engines()
        return [self.admission(config).status(name) for name, config in named.items()]

    async def turn_input(
        self,
        worker: str,
        fresh: TurnInput,
        resolved_since: float | None = None,
        *,
        cached: bool = False,
    ) -> TurnInput:
        """*fresh*, the input of a turn of *worker*, with the stores' memory
        and briefing gates as they are now, for every surface alike (gates
        resolved after *resolved_since* come with their outcome). A session
        gives its own parts in *fresh* (history, backlog, what it already
        shows), a continuation run its gate's outcome. A warm session's turn
        reads them *cached*: its first write checks they were current.
        """
        stores = self.stores
        return msgspec.structs.replace(
            fresh,
            memory=await stores.memory.view(worker, cached=cached),
            gates=await stores.gates.briefing_for(worker, resolved_since, cached=cached),
        )

    async def run_turn(
        self,
        run: ActiveRun,
        engines: Sequence[NamedEngine],
        compile_fn: Callable[[], Compilation],
        transcript: list[ChatMessage],
        on_delta: DeltaSink,
        *,
        on_wait: WaitSink | None = None,
        previous_input_tokens: int | None = None,
        seen: int | None = None,
        cache_plan: CachePlan | None = None,
        cached: bool = False,
        carried: CarriedSteps | None = None,
    ) -> TurnOutcome:
        """Compile, trace, send and record one turn of *run*.

        *transcript* is the run's append-only message list; the new user
        turn is appended to it and stays there even when the engine fails,
        so the next turn's request extends this one's. A session's later
        turns pass *previous_input_tokens*, the size of the request before:
        all of it is a reusable prefix, and *seen*, the channel seq their
        input covers, recorded with the user turn so a resumed session
        continues from it.

        *engines* answer each engine call: the first, or when it cannot
        answer before any output reached the client, the next (the run's
        fallbacks), each call starting from the first again. *on_wait*
        hears why a call waits: its engine's queue or limits, a provider's
        backoff, a fallback. *cache_plan* is how long the provider should
        keep the prefix (a session's choice, see ``plan_cache``). A warm
        session's turn reads its prefix state *cached*, and leaves its last
        reply for the session's ``conclude`` (``ActiveRun.record_later``).
        The first turn of a session that took a turn over goes on from the
        tool steps *carried* over, recorded and traced as its own first.
        """
        # A provider that cannot be set up (no key, no model) fails the turn
        # before anything is traced or recorded.
        self.engine(engines[0].config)
        watch = self.telemetry.turn(run.info, engines[0].config)
        outcome: OutcomeLabel = "failed"
        try:
            turned = await self._turn(
                watch,
                run,
                engines,
                compile_fn,
                transcript,
                on_delta,
                on_wait,
                previous_input_tokens,
                seen,
                cache_plan,
                cached,
                carried,
            )
            outcome = "ok"
            return turned
        except CompileError:
            outcome = "compile_failed"
            raise
        except EngineError:
            outcome = "engine_failed"
            raise
        except ShutdownError:
            outcome = "interrupted"
            raise
        finally:
            watch.finish(outcome)

    async def _commit_turn(
        self,
        run: ActiveRun,
        record: ContextRecord,
        user: TranscriptEntry,
        own: PrefixState,
        transcript: list[ChatMessage],
        *,
        cached: bool,
    ) -> None:
        """Make a turn's trace *record* and *user* turn durable, before the
        engine sees a byte, and the pair's prefix state *own* beside them.
        Once the user turn is durable the request holds it, even if the
        prefix state's write fails."""

        async def commit() -> None:
            await run.append(record, (user,))
            transcript.append(ChatMessage(role="user", content=user.content))

        worker, channel = run.info.worker, run.info.channel
        if cached:
            # A warm turn's first write may find it stale (``StaleError``,
            # nothing written), and its prefix is its own: written once.
            await commit()
            await self.prefixes.put(worker, channel, own)
        else:
            await together(commit, partial(self.prefixes.put, worker, channel, own))

    async def _turn(
        self,
        watch: TurnWatch,
        run: ActiveRun,
        engines: Sequence[NamedEngine],
        compile_fn: Callable[[], Compilation],
        transcript: list[ChatMessage],
        on_delta: DeltaSink,
        on_wait: WaitSink | None,
        previous_input_tokens: int | None,
        seen: int | None,
        cache_plan: CachePlan | None,
        cached: bool,
        carried: CarriedSteps | None,
    ) -> TurnOutcome:
        compilation = await self._compiled(watch, run, compile_fn)
        system = compilation.system
        worker, channel = run.info.worker, run.info.channel
        previous = await self.prefixes.get(worker, channel, cached=cached)
        own = prefix_state(system, run.info.id, self.clock())
        # A session's later turns reuse its own frozen system part, whatever
        # other runs of the channel did in between.
        checks = check_prefix(own if previous_input_tokens is not None else previous, system)
        record = msgspec.structs.replace(compilation.record, cache=checks)
        user = TranscriptEntry(
            turn=record.turn,
            role="user",
            content=compilation.input_text,
            at=self.clock(),
            seen=seen,
        )

        with watch.phase("commit"):
            await self._commit_turn(run, record, user, own, transcript, cached=cached)
        tools = TurnTools(
            run.info,
            record.turn,
            # Enforcement, not prompt: read at each call.
            lambda: self.org.workers.get(worker, WorkerConfig()),
            lambda: Gateway(self.org.gateway),
            self.stores,
            self.clock,
            watch,
        )
        call = _Call(
            run,
            engines,
            record,
            system,
            checks,
            transcript,
            on_delta,
            on_wait,
            tools,
            watch,
            cache_plan,
        )
        first_step = 1 if carried is None else await self._carry(call, carried)
        answer = await self._complete(call, first_step)
        reply = answer.reply
        if previous_input_tokens is not None:
            reusable = previous_input_tokens
        elif reply.usage is not None:
            reusable = _prefix_tokens(checks, compilation, reply.usage)
        else:
            reusable = 0
        idle_s = own.at - previous.at if previous is not None else None
        await self._answered(call, first_step, answer, reusable, idle_s)
        reply, steps = await self._tool_loop(call, reply, first_step)
        return TurnOutcome(
            run=run.info.id, turn=record.turn, reply=reply, record=record, steps=steps
        )

    async def _compiled(
        self, watch: TurnWatch, run: ActiveRun, compile_fn: Callable[[], Compilation]
    ) -> Compilation:
        """The turn's compilation; a failed one is traced before it is raised."""
        worker = run.info.worker
        try:
            with watch.phase("compile"):
                if self._slow_compiles.get(worker, False):
                    # The stores hand over snapshots a thread may read
                    # while the loop keeps writing.
                    compilation, took = await anyio.to_thread.run_sync(_timed, compile_fn)
                else:
                    compilation, took = _timed(compile_fn)
        except CompileError as exc:
            if exc.record is not None:
                await run.trace(exc.record)
            raise
        self._slow_compiles[worker] = took > ON_LOOP_S
        watch.numbered(compilation.record.turn)
        return compilation

    async def _carry(self, call: _Call, carried: CarriedSteps) -> int:
        """Record the tool steps *carried* over as this turn's first, each
        traced before it is sent; the step of the turn's first engine call
        here. Their calls are not answered again: the results come along."""
        run, turn = call.run, call.record.turn
        limit = call.system.budget.tool_result
        step = 1
        for reply, results in carried.steps():
            at = self.clock()
            lines = [message.content for message in results]
            meta = RunMeta(run=run.info.id, turn=turn, now=at)
            record = carried_step(call.record, lines, limit, meta, step + 1, carried.rollover)
            made = TranscriptEntry(
                turn, "assistant", reply.content, at, step=step, calls=reply.calls, carried=True
            )
            answers = [
                TranscriptEntry(turn, "tool", line, at, step=step + 1, call=m.call, carried=True)
                for line, m in zip(lines, results, strict=True)
            ]
            await run.append(record, [made, *answers])
            call.transcript.extend([reply, *results])
            call.tools.written += notes_written(lines)
            step += 1
        return step

    async def _tool_loop(
        self, call: _Call, reply: EngineReply, step: int
    ) -> tuple[EngineReply, int]:
        """Answer *reply*'s tool calls, the answer to engine call *step*, and
        send the results, until a reply makes none or the turn reaches
        ``[gateway] max_steps``; the last reply, and how many engine calls
        the turn made (those of carried steps included)."""
        while reply.calls:
            # Every step's request is the previous one plus the reply and
            # its results: append-only, traced before it is sent.
            step += 1
            max_steps = self.org.gateway.max_steps
            stop = (
                f"this turn reached its limit of {max_steps} engine calls ([gateway] "
                "max_steps); answer without tools"
                if step > max_steps
                else None
            )
            await self._tool_step(call, step, reply, stop)
            if stop is not None:
                break
            earlier = reply.usage.input_tokens if reply.usage is not None else 0
            answer = await self._complete(call, step)
            reply = answer.reply
            await self._answered(call, step, answer, earlier, 0.0)
        return reply, step

    async def _complete(self, call: _Call, step: int) -> _Answer:
        """One engine call; a failure or a stop is recorded before it is raised."""
        scope = anyio.CancelScope()
        if self._interrupted:
            scope.cancel()
        self._calls.add(scope)
        watch = call.watch.engine_call(step)
        plan = call.cache_plan
        request = EngineRequest(
            system=call.system,
            messages=call.transcript,
            cache_ttl=plan.ttl if plan is not None else None,
            previous_message=call.previous_message,
        )
        # What of the reply reached the client, piece by piece.
        shown = _NotingSink(watch.sink(call.on_delta))
        try:
            with scope:
                answer = await self._first_answer(
                    call.engines, call.run.info.id, request, shown, call.on_wait
                )
        except EngineError as exc:
            watch.failed(exc)
            await self._broken(call, step, shown.shown, str(exc))
            raise
        finally:
            self._calls.discard(scope)
        if scope.cancelled_caught:
            watch.failed(None)
            error = ShutdownError(
                "the daemon is shutting down: this turn was interrupted before the engine "
                "answered; it is recorded, retry after the restart"
            )
            await self._broken(call, step, shown.shown, str(error))
            raise error
        watch.answered(answer.reply, call.transcript[call.answered :])
        return answer

    async def _broken(self, call: _Call, step: int, shown: Sequence[str], error: str) -> None:
        """Record a failed call: the part of its reply the client was shown, if
        any, kept as it was shown and marked incomplete (the next request
        carries it), then the failure."""
        if shown:
            partial = "".join(shown)
            entry = call.entry(step, "assistant", partial, self.clock())
            await call.run.record(msgspec.structs.replace(entry, incomplete=True))
            call.transcript.append(ChatMessage(role="assistant", content=partial))
            call.answered = len(call.transcript)
        await call.run.record(call.entry(step, "error", error, self.clock()))

    async def _first_answer(
        self,
        engines: Sequence[NamedEngine],
        key: str,
        request: EngineRequest,
        on_delta: _NotingSink,
        on_wait: WaitSink | None,
    ) -> _Answer:
        """The reply of the first of *engines* that answers.

        The next engine is tried only while no output has reached the
        client, and only for a failure another provider may not share: a
        provider that is down, overloaded, rate limited or refuses the key.
        A request too long or malformed fails as it is.
        """
        tried: list[tuple[str, str]] = []
        for position, named in enumerate(engines):
            if tried and on_wait is not None:
                await on_wait("fallback", None)
            last = position == len(engines) - 1
            try:
                reply = await self._call_engine(named, key, request, on_delta, on_wait, last)
            except (EngineError, ConfigError) as exc:
                failure = _engine_failure(named, exc)
                if on_delta.shown or last or not _falls_back(failure):
                    raise _failed(failure, [*tried, (named.name, str(failure))]) from exc
                tried.append((named.name, str(failure)))
                log.warning("engine %s cannot answer (%s); trying the next", named.name, failure)
                continue
            reason = "; ".join(f"{name}: {error}" for name, error in tried) or None
            return _Answer(reply, named, reason)
        raise AssertionError("a run has at least one engine")

    async def _call_engine(
        self,
        named: NamedEngine,
        key: str,
        request: EngineRequest,
        on_delta: DeltaSink,
        on_wait: WaitSink | None,
        last: bool,
    ) -> EngineReply:
        """One engine's reply, within its limits (waiting in its queue as
        *key*, a session or run) and unless its breaker is open. Only the
        *last* engine to try waits out a provider's ``retry-after``, whether
        its admission holds one or a response sends it: with another engine
        after it, the call goes there instead."""
        config = named.config
        engine = self.engine(config)
        admission = self.admission(config)
        paused = admission.paused()
        if paused is not None and not last:
            raise EngineError(
                f"{config.kind}: the provider asked for {paused:.1f}s more without calls",
                provider=config.kind,
                retryable=True,
                retry_after=paused,
            )
        retry_in = admission.let_through()
        if retry_in is not None:
            raise EngineError(
                f"{config.kind}: engine {named.name} is paused by its breaker after "
                f"{config.breaker_failures} failed calls in a row; retry in {retry_in:.1f}s",
                provider=config.kind,
                retryable=True,
                retry_after=retry_in,
            )
        tokens = _input_tokens(request) if config.input_tokens_per_minute is not None else 0
        if not last:
            request = msgspec.structs.replace(request, patient=False)
        try:
            async with admission.slot(key, tokens, on_wait):
                reply = await engine.complete(request, on_delta, on_wait)
        except EngineError as exc:
            # A provider that answered, if only to refuse, is up.
            if _falls_back(exc):
                admission.failed()
            else:
                admission.succeeded()
            raise
        except BaseException:
            admission.abandoned()
            raise
        admission.succeeded()
        return reply

    async def _answered(
        self, call: _Call, step: int, answer: _Answer, reusable: int, idle_s: float | None
    ) -> None:
        """Record the reply, its tool calls and its cache verdict, and append it."""
        reply, engine = answer.reply, answer.engine.config
        cache = judge_cache(
            call.checks,
            reply.usage,
            reusable_tokens=reusable,
            min_tokens=engine.cache_min_tokens,
            measured=self.engine(engine).measures_cache,
            idle_s=idle_s,
        )
        if answer.fallback is not None:
            # A cold cache at another provider, not a prefix the compiler moved.
            cause = f"answered by fallback engine {answer.engine.name}: {answer.fallback}"
            cache = msgspec.structs.replace(cache, verdict="fallback", cause=cause)
        elif call.cache_plan is not None:
            cache = _with_lifetime(cache, call.cache_plan)
        if reply.diagnosis is not None:
            cache = with_diagnosis(cache, reply.diagnosis)
        call.previous_message = reply.message_id or call.previous_message
        call.watch.cache(cache.verdict)
        now = self.clock()
        cost = self.pricing.cost(engine, self.org.prices, reply.usage, now)
        call.watch.billed(cost)
        entry = call.entry(step, "assistant", reply.text, now)
        entry = msgspec.structs.replace(
            entry,
            usage=reply.usage,
            cache=cache,
            calls=reply.calls,
            cost=cost,
            provider_id=reply.message_id,
        )
        if reply.calls:
            # Durable before any call is answered: the calls are its.
            await call.run.record(entry)
        else:
            # The turn's last reply: written with the run's next write.
            await call.run.record_later(entry)
        call.transcript.append(ChatMessage(role="assistant", content=reply.text, calls=reply.calls))
        call.answered = len(call.transcript)

    async def _tool_step(
        self, call: _Call, step: int, reply: EngineReply, stop: str | None
    ) -> None:
        """Answer *reply*'s calls; trace and record the results, then append them."""
        results, notes = await call.tools.answer(reply.calls, call.system.tools, stop=stop)
        with call.watch.phase("commit"):
            await self.record_results(
                call.run, call.record, call.system, call.transcript, step, results, notes
            )

    async def record_results(
        self,
        run: ActiveRun,
        first: ContextRecord,
        system: SystemPrompt,
        transcript: list[ChatMessage],
        step: int,
        results: Sequence[ToolResult],
        notes: Sequence[NoteTrace] = (),
    ) -> None:
        """Trace and record *results*, the tool messages of step *step* of
        the turn *first* is the record of, then append them to *transcript*."""
        meta = RunMeta(run=run.info.id, turn=first.turn, now=self.clock())
        limit = system.budget.tool_result
        lines, step_record = compile_step(first, results, limit, meta, step, notes)
        entries = [
            TranscriptEntry(
                turn=first.turn, role="tool", content=line, at=meta.now, step=step, call=result.call
            )
            for result, line in zip(results, lines, strict=True)
        ]
        # Both are durable before the engine sees a byte of this step.
        await run.append(step_record, entries)
        transcript.extend(
            ChatMessage(role="tool", content=line, call=result.call)
            for result, line in zip(results, lines, strict=True)
        )

    async def aclose(self) -> None:
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            await engine.aclose()


@dataclass(eq=False)
class _Call:
    """What every engine call of one turn shares."""

    run: ActiveRun
    engines: Sequence[NamedEngine]
    record: ContextRecord
    system: SystemPrompt
    checks: Sequence[BoundaryCheck]
    transcript: list[ChatMessage]
    on_delta: DeltaSink
    on_wait: WaitSink | None
    tools: TurnTools
    watch: TurnWatch
    cache_plan: CachePlan | None
    # The provider's id of the last reply: each call's request names it.
    previous_message: str | None = field(init=False)
    # The transcript up to the last reply: what follows is what the next
    # engine call adds to the request.
    answered: int = field(init=False)

    def __post_init__(self) -> None:
        self.previous_message = self.cache_plan.previous_message if self.cache_plan else None
        self.answered = len(self.transcript) - 1

    def __repr__(self) -> str:
        return f"_Call({self.run.info.id!r}, turn {self.record.turn})"

    def entry(
        self, step: int, role: Literal["assistant", "error", "tool"], content: str, at: float
    ) -> TranscriptEntry:
        return TranscriptEntry(turn=self.record.turn, role=role, content=content, at=at, step=step)


class _NotingSink:
    """A delta sink that keeps what it passed on: the reply as the client saw it."""

    def __init__(self, on_delta: DeltaSink) -> None:
        self.shown: list[str] = []
        self._on_delta = on_delta

    def __repr__(self) -> str:
        return f"_NotingSink({len(self.shown)} pieces)"

    async def __call__(self, text: str) -> None:
        self.shown.append(text)
        await self._on_delta(text)


class _Answer(msgspec.Struct, frozen=True):
    """A reply, the engine that gave it, and why the ones before it did not."""

    reply: EngineReply
    engine: NamedEngine
    fallback: str | None = None


def _timed(compile_fn: Callable[[], Compilation]) -> tuple[Compilation, float]:
    """The compilation and the CPU time it took: in a thread, not the time
    it waited for the GIL."""
    start = time.thread_time()
    return compile_fn(), time.thread_time() - start


def _engine_failure(named: NamedEngine, exc: EngineError | ConfigError) -> EngineError:
    """*exc* as an engine failure: a fallback that cannot be set up (no key) is one."""
    if isinstance(exc, EngineError):
        return exc
    return EngineError(f"engine {named.name} cannot be used: {exc}", provider=named.config.kind)


# Statuses another provider may well not answer with: a key it refuses,
# a model it lacks.
_ANOTHER_MAY_ANSWER = frozenset({401, 403, 404})


def _falls_back(failure: EngineError) -> bool:
    """Whether another engine may answer what *failure*'s could not: a
    provider that is down, overloaded, rate limited, refuses the key, or
    answered with no reply at all (a 200 that is not a stream: a proxy's
    page, a server that ignores ``stream``)."""
    if failure.context_exceeded:
        return False
    status = failure.status
    return failure.retryable or status is None or status < 400 or status in _ANOTHER_MAY_ANSWER


def _failed(last: EngineError, tried: Sequence[tuple[str, str]]) -> EngineError:
    """The error of a call no engine answered: *last*'s, naming every engine tried."""
    message = str(last)
    if len(tried) > 1:
        message = "no engine answered: " + "; ".join(f"{name}: {error}" for name, error in tried)
    return EngineError(
        message,
        provider=last.provider,
        status=last.status,
        retryable=last.retryable,
        context_exceeded=last.context_exceeded,
        tried=tuple(tried),
        retry_after=last.retry_after,
    )


def _with_lifetime(cache: CacheCheck, plan: CachePlan) -> CacheCheck:
    """*cache* with the lifetime the call asked for; a miss right after the
    lifetime changed is the provider writing the prefix anew, not a change."""
    cause = cache.cause
    if plan.previous is not None and plan.previous != plan.ttl and cache.verdict != "hit":
        changed = (
            f"the cache lifetime changed from {plan.previous} to {plan.ttl}: the provider "
            "writes the prefix again (the prefix itself did not change)"
        )
        cause = f"{changed}; {cause}" if cause else changed
    return msgspec.structs.replace(cache, ttl=plan.ttl, ttl_reason=plan.reason, cause=cause)


def _input_tokens(request: EngineRequest) -> int:
    """About how many tokens *request* sends: four characters a token."""
    chars = len(request.system.text) + sum(len(m.content) for m in request.messages)
    return chars // 4


def _prefix_tokens(checks: Sequence[BoundaryCheck], compilation: Compilation, usage: Usage) -> int:
    """Tokens before the last stable boundary, in the provider's own count.

    The provider reports only the request's total, so the prefix gets its
    share by characters: the request is the system part and this input.
    """
    stable = [
        boundary.offset
        for boundary, check in zip(compilation.system.boundaries, checks, strict=True)
        if check.status == "stable"
    ]
    if not stable:
        return 0
    prompt_chars = len(compilation.system.text) + len(compilation.input_text)
    return usage.input_tokens * stable[-1] // max(prompt_chars, 1)


def failure_text(exc: Exception) -> str:
    """What a failed run or task records: our message, or the unexpected error's type too."""
    return str(exc) if isinstance(exc, RosterError) else f"{type(exc).__name__}: {exc}"
