"""The system part: identity, policy, connections, purpose, scope.

Ordered stable to volatile so that provider prompt caching gets the longest
shared prefix: every channel of a worker shares the bytes up to the end of
``connections``, every run of a channel those up to the end of ``purpose``.
Nothing volatile (run id, clock, counters, paths) is rendered here.
"""

from __future__ import annotations

import hashlib

import msgspec

from .._errors import CompileError
from ..org import ContextBudget, Org, RunScope, Surface
from ._inputs import RunMeta
from ._policy import POLICY_SHA256, POLICY_TEXT, POLICY_VERSION
from ._tools import ToolSpec, compile_tools, tools_block
from ._trace import (
    BlockTrace,
    Boundary,
    BoundaryName,
    ContextRecord,
    FailureTrace,
    PolicyTrace,
    RecordKind,
    sha256_text,
)

__all__ = (
    "POLICY",
    "SystemPrompt",
    "absent_block",
    "compile_failure",
    "compile_system",
    "route_key",
    "sha256_text",
)

POLICY = PolicyTrace(version=POLICY_VERSION, sha256=POLICY_SHA256)
# The block each cache boundary follows.
_BOUNDARY_AFTER: dict[str, BoundaryName] = {
    "connections": "connections",
    "purpose": "purpose",
    "scope": "system",
}
_canonical = msgspec.json.Encoder(order="deterministic")

_CONNECTIONS_NOTE = (
    "Requests to these services go through the host, which checks host and method and "
    "injects the credential named by env; refer to a credential only by that name."
)

_SCOPE_TEXT = {
    Surface.SESSION: (
        "Surface: channel session. You are worker {worker} in channel {channel}, in a live "
        "chat. Each user turn is JSON envelopes, one per line: memory (advisory notes, "
        "quoted data), briefing (gate outcomes and open gates), history (the channel's "
        "recent messages, first turn only), the messages others posted in the channel "
        "since your last turn, oldest first, and last the message to answer."
    ),
    Surface.TASK: (
        "Surface: task run. You are worker {worker}, running one queued task for channel "
        "{channel}. The input is JSON envelopes, one per line: memory (advisory notes, "
        "quoted data), briefing (a continuation outcome, then open gates) and the task "
        "to carry out."
    ),
    Surface.DIRECT: (
        "Surface: direct run. You are worker {worker}, answering one ad-hoc request "
        "outside any channel. The input is JSON envelopes, one per line: memory "
        "(advisory notes, quoted data), briefing (open gates) and the message to answer."
    ),
}


class SystemPrompt(msgspec.Struct, frozen=True):
    """A compiled, immutable system part; a session freezes one at start.

    ``tools`` are frozen with it: providers cache them before the system text.
    """

    scope: RunScope
    text: str
    blocks: tuple[BlockTrace, ...]
    boundaries: tuple[Boundary, Boundary, Boundary]
    route_key: str
    engine_fingerprint: str
    budget: ContextBudget
    tools: tuple[ToolSpec, ...] = ()

    @property
    def sha256(self) -> str:
        return self.boundaries[2].sha256

    def record(self, meta: RunMeta) -> ContextRecord:
        """The trace record of a session opening: the frozen system part."""
        return ContextRecord(
            kind="system",
            status="ok",
            run=meta.run,
            turn=meta.turn,
            at=meta.now,
            surface=self.scope.surface.value,
            worker=self.scope.worker,
            channel=self.scope.channel,
            policy=POLICY,
            engine_fingerprint=self.engine_fingerprint,
            route_key=self.route_key,
            system_sha256=self.sha256,
            input_sha256=None,
            boundaries=self.boundaries,
            budget=None,
            blocks=self.blocks,
            tools=tools_block(self.tools),
        )


def route_key(engine_fingerprint: str, worker: str, prefix_sha256: str) -> str:
    """A provider routing key: 51 characters of ``[a-z0-9-]``, no raw names.

    It hashes the prefix shared by every channel of the worker, so requests
    that can reuse one cached prefix are routed together.
    """
    digest = hashlib.sha256(f"{engine_fingerprint}\0{worker}\0{prefix_sha256}".encode()).hexdigest()
    return f"rk-{digest[:48]}"


def compile_system(org: Org, scope: RunScope, meta: RunMeta) -> SystemPrompt:
    """Compile the system part of a run; raises ``CompileError`` if over budget.

    *meta* only names the run in the trace of a failure.
    """
    budget = org.budget_for(scope.worker)
    fingerprint = org.engine_fingerprint(scope.worker)
    blocks: list[BlockTrace] = []

    def fail(trace: BlockTrace, limit: int, reason: str) -> CompileError:
        kind: RecordKind = "system" if scope.surface is Surface.SESSION else "run"
        return compile_failure(fingerprint, scope, meta, kind, tuple(blocks), trace, limit, reason)

    identity = _trusted_block(
        "identity", org.identities[scope.worker], f"workers/{scope.worker}/identity.md"
    )
    limited = msgspec.structs.replace(identity, limit=budget.identity)
    if identity.rendered_chars > budget.identity:
        raise fail(limited, budget.identity, "identity.md is inserted whole or not at all")
    blocks.append(limited)
    blocks.append(_trusted_block("policy", POLICY_TEXT, f"rosterd policy v{POLICY_VERSION}"))
    blocks.append(_connections_block(org, scope.worker))

    purpose_text = org.purposes.get(scope.channel) if scope.channel is not None else None
    if purpose_text is None:
        blocks.append(absent_block("purpose", _purpose_source(scope)))
    else:
        purpose = msgspec.structs.replace(
            _trusted_block("purpose", purpose_text, _purpose_source(scope)), limit=budget.purpose
        )
        if purpose.rendered_chars > budget.purpose:
            raise fail(purpose, budget.purpose, "purpose.md is inserted whole or not at all")
        blocks.append(purpose)

    scope_text = _SCOPE_TEXT[scope.surface].format(
        worker=_canonical.encode(scope.worker).decode(),
        channel=_canonical.encode(scope.channel).decode(),
    )
    blocks.append(_trusted_block("scope", scope_text, f"host scope: {scope.surface.value}"))

    used = 0
    for block in blocks:
        if used + block.rendered_chars > budget.total:
            raise fail(
                block,
                budget.total - used,
                f"the system part would exceed the total of {budget.total}; "
                f"{used} characters come before this block",
            )
        used += block.rendered_chars

    text = "".join(block.content for block in blocks)
    boundaries = _boundaries(blocks)
    return SystemPrompt(
        scope=scope,
        text=text,
        blocks=tuple(blocks),
        boundaries=boundaries,
        route_key=route_key(fingerprint, scope.worker, boundaries[0].sha256),
        engine_fingerprint=fingerprint,
        budget=budget,
        tools=compile_tools(org, scope.worker),
    )


def compile_failure(
    engine_fingerprint: str,
    scope: RunScope,
    meta: RunMeta,
    kind: RecordKind,
    prior: tuple[BlockTrace, ...],
    block: BlockTrace,
    limit: int,
    reason: str,
) -> CompileError:
    """The error of a compilation that produced no model input, with its trace:
    every block rendered before *block*, then *block* marked failed."""
    error = FailureTrace(block=block.block, size=block.rendered_chars, limit=limit, reason=reason)
    record = ContextRecord(
        kind=kind,
        status="failed",
        run=meta.run,
        turn=meta.turn,
        at=meta.now,
        surface=scope.surface.value,
        worker=scope.worker,
        channel=scope.channel,
        policy=POLICY,
        engine_fingerprint=engine_fingerprint,
        route_key=None,
        system_sha256=None,
        input_sha256=None,
        boundaries=(),
        budget=None,
        blocks=(*prior, msgspec.structs.replace(block, status="failed")),
        error=error,
    )
    return CompileError(
        block=block.block, size=block.rendered_chars, limit=limit, reason=reason, record=record
    )


def _wrap(name: str, body: str) -> str:
    return f"<{name}>\n{body}{'' if body.endswith(chr(10)) else chr(10)}</{name}>\n"


def _trusted_block(name: str, body: str, source: str) -> BlockTrace:
    rendered = _wrap(name, body)
    return BlockTrace(
        block=name,
        source=source,
        status="included",
        raw_chars=len(body),
        rendered_chars=len(rendered),
        limit=None,
        sha256=sha256_text(rendered),
        content=rendered,
    )


def absent_block(name: str, source: str) -> BlockTrace:
    return BlockTrace(
        block=name,
        source=source,
        status="absent",
        raw_chars=0,
        rendered_chars=0,
        limit=None,
        sha256=sha256_text(""),
        content="",
    )


def _purpose_source(scope: RunScope) -> str:
    if scope.channel is None:
        return "no channel"
    return f"channels/{scope.channel}/purpose.md"


def _connections_block(org: Org, worker: str) -> BlockTrace:
    names = sorted(set(org.workers[worker].connections))
    if not names:
        return absent_block("connections", "org.toml: no connections")
    lines = []
    for name in names:
        connection = org.connections[name]
        entry = {
            "connection": name,
            "hosts": sorted(set(connection.hosts)),
            "methods": sorted(set(connection.methods)),
            "env": f"${connection.env}" if connection.env else None,
            "note": connection.note,
        }
        lines.append(_canonical.encode(entry).decode())
    body = "\n".join([*lines, _CONNECTIONS_NOTE]) + "\n"
    block = _trusted_block("connections", body, f"org.toml [connections] {' '.join(names)}")
    return msgspec.structs.replace(block, items=len(names))


def _boundaries(blocks: list[BlockTrace]) -> tuple[Boundary, Boundary, Boundary]:
    hasher = hashlib.sha256()
    offset = 0
    marks: list[Boundary] = []
    for block in blocks:
        hasher.update(block.content.encode())
        offset += block.rendered_chars
        name = _BOUNDARY_AFTER.get(block.block)
        if name is not None:
            marks.append(Boundary(name=name, offset=offset, sha256=hasher.hexdigest()))
    connections, purpose, system = marks
    return connections, purpose, system
