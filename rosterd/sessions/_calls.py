"""Answering the tool calls of one reply: validate, then file a gate or forward.

Model output is untrusted: each call is checked against the definitions the
model was given (the frozen ones of a session) before anything leaves
rosterd, and a call that fails the check is answered by rosterd itself.
``file_gate`` files a gate against the run; every other valid call goes to
the gateway. Calls are answered in the order the model made them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..compiler import (
    GateRequest,
    Refusal,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolSpec,
    check_call,
)
from ..stores import GateStore
from ._gateway import Gateway
from ._runs import RunInfo

__all__ = ("CALLS_PER_STEP", "answer_calls")

log = logging.getLogger("rosterd.tools")

# A reply may hold any number of calls; each may wait for the gateway.
CALLS_PER_STEP = 16


async def answer_calls(
    calls: Sequence[ToolCall],
    tools: Sequence[ToolSpec],
    run: RunInfo,
    gateway: Gateway,
    gates: GateStore,
    now: float,
    *,
    stop: str | None = None,
) -> list[ToolResult]:
    """One result per call; with *stop*, every call is refused with that reason."""
    results = []
    for number, call in enumerate(calls):
        if stop is None and number >= CALLS_PER_STEP:
            reason = f"at most {CALLS_PER_STEP} calls are answered per step"
            results.append(ToolResult(call.id, call.name, "refused", reason))
            continue
        if stop is not None:
            results.append(ToolResult(call.id, call.name, "refused", stop))
            continue
        match check_call(tools, call):
            case Refusal(status=status, text=text):
                log.info("run %s: %s call %s %s: %s", run.id, call.name, call.id, status, text)
                results.append(ToolResult(call.id, call.name, status, text))
            case GateRequest(summary=summary):
                gate = await gates.file(run.worker, summary, now, run.channel, run.id)
                text = f"gate {gate.id} filed; a person will resolve it"
                if run.task is not None:
                    text += "; this task pauses until then and continues with the outcome"
                results.append(ToolResult(call.id, call.name, "ok", text))
            case ToolRequest() as request:
                answered, reason = await gateway.call(run.id, run.worker, request)
                results.append(ToolResult(call.id, call.name, answered, reason))
    return results
