"""Answering the tool calls of one turn: validate, then act or forward.

Model output is untrusted: each call is checked against the definitions the
model was given (the frozen ones of a session) before anything leaves
rosterd, and a call that fails the check is answered by rosterd itself.
``file_gate`` files a gate against the run; ``remember`` and ``forget``
write or retire a note of the run's own worker, in the run's own channel
(worker-wide only where the worker's ``memory_scope`` allows), each durable
before its result is returned; every other valid call goes to the gateway.
Calls are answered in the order the model made them.

No argument names a channel or a worker: the scope of a note comes from
the run, which the host created from its RPC call. What the memory tools
may write is enforcement, like the gateway: the frozen definitions bound
it, and the worker's ``memory_scope`` as the org has it at the call
narrows it (an edit to ``"off"`` stops them at once).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .._errors import NotFoundError, StorageError
from ..compiler import (
    ForgetRequest,
    GateRequest,
    NoteScope,
    NoteTrace,
    Refusal,
    RememberRequest,
    Retirement,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolSpec,
    check_call,
    note_scopes,
)
from ..observe import TurnWatch
from ..org import REMEMBER, WorkerConfig
from ..protocol import RunInfo
from ..stores import State
from ._gateway import Gateway

log = logging.getLogger("rosterd.tools")

# A reply may hold any number of calls; each may wait for the gateway.
CALLS_PER_STEP = 16
_MEMORY_OFF = "this worker's memory is now off (memory_scope): no note is written or retired"


@dataclass(eq=False)
class TurnTools:
    """Answers the tool calls of one turn of *run*, counting the notes it
    writes; *worker* and *gateway* are read at each call, as the org has them."""

    run: RunInfo
    turn: int
    worker: Callable[[], WorkerConfig]
    gateway: Callable[[], Gateway]
    stores: State
    clock: Callable[[], float]
    watch: TurnWatch
    written: int = field(default=0, init=False)

    def __repr__(self) -> str:
        return f"TurnTools({self.run.id!r}, turn {self.turn}, {self.written} notes written)"

    async def answer(
        self, calls: Sequence[ToolCall], tools: Sequence[ToolSpec], *, stop: str | None = None
    ) -> tuple[list[ToolResult], list[NoteTrace]]:
        """One result per call, and the notes the calls wrote or retired;
        with *stop*, every call is refused with that reason."""
        results: list[ToolResult] = []
        notes: list[NoteTrace] = []
        # A name is model output: telemetry hears it only if it names a tool.
        given = {tool.name for tool in tools}
        for number, call in enumerate(calls):
            if stop is None and number >= CALLS_PER_STEP:
                stop_here = f"at most {CALLS_PER_STEP} calls are answered per step"
                result = ToolResult(call.id, call.name, "refused", stop_here)
            elif stop is not None:
                result = ToolResult(call.id, call.name, "refused", stop)
            else:
                result, note = await self._answer(call, tools)
                if note is not None:
                    notes.append(note)
            self.watch.tool(call.name if call.name in given else None, call.id, result.status)
            results.append(result)
        return results, notes

    async def _answer(
        self, call: ToolCall, tools: Sequence[ToolSpec]
    ) -> tuple[ToolResult, NoteTrace | None]:
        run = self.run
        match check_call(tools, call):
            case Refusal(status=status, text=text):
                log.info("run %s: %s call %s %s: %s", run.id, call.name, call.id, status, text)
                return ToolResult(call.id, call.name, status, text), None
            case GateRequest(summary=summary):
                gate = await self.stores.gates.file(
                    run.worker, summary, self.clock(), run.channel, run.id
                )
                text = f"gate {gate.id} filed; a person will resolve it"
                if run.task is not None:
                    text += "; this task pauses until then and continues with the outcome"
                return ToolResult(call.id, call.name, "ok", text), None
            case RememberRequest() as request:
                return await self._remember(call, request, tools)
            case ForgetRequest() as request:
                return await self._forget(call, request, tools)
            case ToolRequest() as request:
                answered, reason = await self.gateway().call(run.id, run.worker, request)
                self.watch.gateway(answered)
                return ToolResult(call.id, call.name, answered, reason), None
        raise AssertionError("check_call answers one of the cases above")

    def _scopes(self, tools: Sequence[ToolSpec]) -> tuple[NoteScope, ...]:
        """The scopes the run may write notes in: those the definitions it
        was given admit, less any the worker's ``memory_scope`` no longer does."""
        given = next((tool.scopes for tool in tools if tool.name == REMEMBER), ())
        now = note_scopes(self.worker().memory_scope)
        return tuple(scope for scope in given if scope in now)

    async def _remember(
        self, call: ToolCall, request: RememberRequest, tools: Sequence[ToolSpec]
    ) -> tuple[ToolResult, NoteTrace | None]:
        run, limit = self.run, self.worker().remember_per_turn
        channel = run.channel if request.scope == "channel" else None
        scopes = self._scopes(tools)
        if not scopes:
            return ToolResult(call.id, call.name, "refused", _MEMORY_OFF), None
        if request.scope not in scopes:
            reason = (
                f"scope {request.scope!r} is no longer allowed for this worker; allowed: "
                f"{', '.join(scopes)}"
            )
            return ToolResult(call.id, call.name, "refused", reason), None
        if self.written >= limit:
            reason = f"at most {limit} notes are written per turn (remember_per_turn)"
            return ToolResult(call.id, call.name, "refused", reason), None
        if request.scope == "channel" and channel is None:
            reason = "this run has no channel: a channel note needs one"
            return ToolResult(call.id, call.name, "refused", reason), None
        try:
            note = await self.stores.memory.add(
                run.worker, request.text, channel, self.clock(), run=run.id, turn=self.turn
            )
        except StorageError as exc:
            log.error("run %s: turn %d could not write a note: %s", run.id, self.turn, exc)
            return ToolResult(call.id, call.name, "error", f"note not saved: {_why(exc)}"), None
        self.written += 1
        where = f"channel {channel}" if channel is not None else "every channel"
        log.info("run %s: turn %d wrote note %s for %s", run.id, self.turn, note.id, where)
        text = f"note {note.id} saved; later sessions of {where} may see it"
        return ToolResult(call.id, call.name, "ok", text), NoteTrace("wrote", note.id, channel)

    async def _forget(
        self, call: ToolCall, request: ForgetRequest, tools: Sequence[ToolSpec]
    ) -> tuple[ToolResult, NoteTrace | None]:
        run = self.run
        # Notes of the run's channel, and worker-wide ones where the worker
        # may write them: what it could have written, it may retire.
        scopes = self._scopes(tools)
        if not scopes:
            return ToolResult(call.id, call.name, "refused", _MEMORY_OFF), None
        channels: list[str | None] = [run.channel] if run.channel is not None else []
        if "worker" in scopes:
            channels.append(None)
        retirement = Retirement(
            note=request.note,
            because=request.because,
            at=self.clock(),
            author="worker",
            run=run.id,
            turn=self.turn,
        )
        try:
            note = await self.stores.memory.retire(run.worker, retirement, channels)
        except NotFoundError:
            text = f"no note {request.note} in this worker's memory for this channel"
            return ToolResult(call.id, call.name, "error", text), None
        except StorageError as exc:
            log.error("run %s: turn %d could not retire a note: %s", run.id, self.turn, exc)
            text = f"note {request.note} not retired: {_why(exc)}"
            return ToolResult(call.id, call.name, "error", text), None
        log.info("run %s: turn %d retired note %s", run.id, self.turn, note.id)
        text = f"note {note.id} retired; it will not be shown again"
        return ToolResult(call.id, call.name, "ok", text), NoteTrace(
            "retired", note.id, note.channel
        )


def _why(failed: StorageError) -> str:
    """What a model is told of a failed memory write: the cause, not the
    state's paths or database. The store kept nothing of it (``StorageError``
    is fail-stop), so the turn goes on: a lost note is no reason to lose
    the answer."""
    cause = os.strerror(failed.errno) if failed.errno is not None else "the store is unavailable"
    return f"writing it failed ({cause}); nothing of it was kept"
