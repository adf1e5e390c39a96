"""The system part: identity, policy, connections, purpose, scope.

Ordered stable to volatile so that provider prompt caching gets the longest
shared prefix: every channel of a worker shares the bytes up to the end of
``connections``, every run of a channel those up to the end of ``purpose``.
Nothing volatile (run id, clock, counters, paths) is rendered here.
"""

from __future__ import annotations

import hashlib

import msgspec

from ..org import ContextBudget, Org, RunScope, Surface
from ._blocks import (
    BOUNDARY_AFTER,
    connections_block,
    identity_block,
    policy_block,
    purpose_block,
    scope_block,
)
from ._items import RunMeta
from ._tools import ToolSpec, compile_tools, tools_block
from ._trace import (
    BlockTrace,
    Boundary,
    CompileError,
    ContextRecord,
    FailureTrace,
    RecordKind,
    context_record,
)


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
        return context_record(
            "system",
            self.scope,
            meta,
            self.engine_fingerprint,
            self.blocks,
            route_key=self.route_key,
            boundaries=self.boundaries,
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

    identity = msgspec.structs.replace(identity_block(org, scope.worker), limit=budget.identity)
    if identity.rendered_chars > budget.identity:
        raise fail(identity, budget.identity, "identity.md is inserted whole or not at all")
    blocks.append(identity)
    blocks.append(policy_block())
    blocks.append(connections_block(org, scope.worker))
    purpose = purpose_block(org, scope)
    if purpose.status != "absent":
        purpose = msgspec.structs.replace(purpose, limit=budget.purpose)
        if purpose.rendered_chars > budget.purpose:
            raise fail(purpose, budget.purpose, "purpose.md is inserted whole or not at all")
    blocks.append(purpose)
    blocks.append(scope_block(scope))

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
    record = context_record(
        kind,
        scope,
        meta,
        engine_fingerprint,
        (*prior, msgspec.structs.replace(block, status="failed")),
        error=error,
    )
    return CompileError(
        block=block.block, size=block.rendered_chars, limit=limit, reason=reason, record=record
    )


def _boundaries(blocks: list[BlockTrace]) -> tuple[Boundary, Boundary, Boundary]:
    hasher = hashlib.sha256()
    offset = 0
    marks: list[Boundary] = []
    for block in blocks:
        hasher.update(block.content.encode())
        offset += block.rendered_chars
        name = BOUNDARY_AFTER.get(block.block)
        if name is not None:
            marks.append(Boundary(name=name, offset=offset, sha256=hasher.hexdigest()))
    connections, purpose, system = marks
    return connections, purpose, system
