"""Trace records: what ``runs/<run-id>/context.jsonl`` holds, one per line.

A record answers "what did the worker see?" byte-exactly: each block's exact
content, sizes, hash and status, the budget arithmetic, the cache boundaries
with their prefix hashes, and the route key.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec

from .._errors import RosterError
from ..org import RunScope
from ._items import RunMeta
from ._policy import POLICY_SHA256, POLICY_VERSION

BlockStatus = Literal["included", "shrunk", "omitted", "absent", "failed"]
RecordKind = Literal["system", "turn", "run", "step"]
BoundaryName = Literal["connections", "purpose", "system"]
PassOverReason = Literal["over the memory limit", "over the room left"]


def sha256_text(text: str) -> str:
    """The hex sha256 of *text* as UTF-8: the hash of every traced content."""
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_text_and_head(text: str, head: int) -> tuple[str, str]:
    """``sha256_text`` of ``text[:head]`` and of *text*, hashing its bytes
    once: the digest of a text's start is a step on the way to the whole's."""
    digest = hashlib.sha256(text[:head].encode())
    start = digest.hexdigest()
    digest.update(text[head:].encode())
    return start, digest.hexdigest()


class AlreadyShown(msgspec.Struct, frozen=True):
    """An item left out of a session turn: the conversation has held it,
    byte for byte, since turn ``since``."""

    id: str
    since: int


class NoteReason(msgspec.Struct, frozen=True, omit_defaults=True):
    """Why a memory note is in the block: its score, the message's words it
    holds, the terms it holds that the ranking borrowed (from the session's
    latest messages, or from the best notes' feedback), and the note beside
    it that lent it the most score."""

    id: str
    score: float
    terms: tuple[str, ...] = ()
    borrowed: tuple[str, ...] = ()
    beside: str | None = None


class PassedOver(msgspec.Struct, frozen=True):
    """A memory note the packing passed over: too long for the block's
    limit itself, or for the room left when it was reached."""

    id: str
    chars: int
    reason: PassOverReason


class BlockTrace(msgspec.Struct, frozen=True):
    """One block: where it came from, how big, what happened to it, its bytes.

    ``items`` counts the envelopes included, ``omitted`` those dropped under
    budget pressure, ``held`` those left out because an earlier turn of the
    session sent them; ``limit`` is the block's own cap (``None`` for blocks
    bounded only by the total).

    Which items are held, each with the turn since which: ``already_shown``
    lists them all, unless ``newly_held`` is set. Then the record says only
    what changed since the run's previous record of this block: the items
    held now that it did not list (or listed since another turn), and the
    ids in ``no_longer_held`` it listed that are not held now. A session's
    records would otherwise repeat every note and gate it ever showed, each
    turn.
    """

    block: str
    source: str
    status: BlockStatus
    raw_chars: int
    rendered_chars: int
    limit: int | None
    sha256: str
    content: str
    items: int = 0
    omitted: int = 0
    already_shown: tuple[AlreadyShown, ...] = ()
    notes: tuple[NoteReason, ...] | None = None
    passed_over: tuple[PassedOver, ...] | None = None
    held: int = 0
    newly_held: tuple[AlreadyShown, ...] | None = None
    no_longer_held: tuple[str, ...] = ()


def held_items(previous: dict[str, int] | None, block: BlockTrace) -> dict[str, int]:
    """The items *block* says the conversation holds, id to the turn since
    which; *previous* is what the run's previous record of this block said
    (``None`` if there was none)."""
    if block.newly_held is None:
        # A record that lists them all: the first of a session, a run's
        # only one, or one written before records said only what changed.
        return {item.id: item.since for item in block.already_shown}
    held = dict(previous or {})
    for gone in block.no_longer_held:
        held.pop(gone, None)
    held.update((item.id, item.since) for item in block.newly_held)
    return held


class Boundary(msgspec.Struct, frozen=True):
    """A cache breakpoint: the system text up to ``offset`` characters."""

    name: BoundaryName
    offset: int
    sha256: str


class BoundaryCheck(msgspec.Struct, frozen=True):
    """One boundary against the previous compilation of the same worker and
    channel: ``stable``, ``changed`` (with the first differing block and its
    cause) or ``new`` when there was nothing to compare with."""

    name: BoundaryName
    status: Literal["stable", "changed", "new"]
    block: str | None = None
    cause: str | None = None
    previous_run: str | None = None


class BudgetTrace(msgspec.Struct, frozen=True):
    """The arithmetic of one compilation, in rendered characters.

    ``advisory`` is what the total leaves after the system part and the
    request; memory, history (or the backlog of messages since the last
    turn) and briefing were fitted into it in that order of sacrifice.
    """

    total: int
    system: int
    request: int
    advisory: int
    memory: int
    history: int
    briefing: int
    used: int
    backlog: int = 0


class PolicyTrace(msgspec.Struct, frozen=True):
    """The policy template the system part was compiled with: its version
    and the sha256 of its text (``compiler/policy/v<version>.md``)."""

    version: str
    sha256: str


class FailureTrace(msgspec.Struct, frozen=True):
    """On a ``failed`` record: the block that did not fit, its rendered size,
    the room it had (``limit``: its own limit, or what the total left it)
    and why; ``CompileError`` carries the same four."""

    block: str
    size: int
    limit: int
    reason: str


class RolloverTrace(msgspec.Struct, frozen=True):
    """On a session's ``system`` record: the session it continues, and why;
    on a ``step`` record, the session whose tool step it carries over."""

    previous: str
    reason: str


class NoteTrace(msgspec.Struct, frozen=True):
    """On a ``step`` record: a note its tool calls wrote or retired, and the
    note's channel (``None``: worker-wide)."""

    action: Literal["wrote", "retired"]
    note: str
    channel: str | None


class ContextRecord(msgspec.Struct, frozen=True):
    """One compilation. A session writes a ``system`` record when it opens and
    a ``turn`` record per turn; a task or direct run writes one ``run``
    record holding both parts. Each later engine call of a turn (``step`` 2
    and on) writes a ``step`` record holding the tool results it adds, and
    the notes those calls wrote or retired. ``tools`` holds the tool
    definitions on ``system`` and ``run`` records.
    """

    kind: RecordKind
    status: Literal["ok", "failed"]
    run: str
    turn: int
    at: float
    surface: str
    worker: str
    channel: str | None
    policy: PolicyTrace
    engine_fingerprint: str
    route_key: str | None
    system_sha256: str | None
    input_sha256: str | None
    boundaries: tuple[Boundary, ...]
    budget: BudgetTrace | None
    blocks: tuple[BlockTrace, ...]
    error: FailureTrace | None = None
    cache: tuple[BoundaryCheck, ...] = ()
    rollover: RolloverTrace | None = None
    step: int = 1
    tools: BlockTrace | None = None
    notes: tuple[NoteTrace, ...] = ()


_POLICY = PolicyTrace(version=POLICY_VERSION, sha256=POLICY_SHA256)


def context_record(
    kind: RecordKind,
    scope: RunScope,
    meta: RunMeta,
    engine_fingerprint: str,
    blocks: tuple[BlockTrace, ...],
    *,
    route_key: str | None = None,
    input_sha256: str | None = None,
    boundaries: tuple[Boundary, ...] = (),
    budget: BudgetTrace | None = None,
    tools: BlockTrace | None = None,
    error: FailureTrace | None = None,
    step: int = 1,
    notes: tuple[NoteTrace, ...] = (),
) -> ContextRecord:
    """The one way a record is made: every kind, failed (with *error*) or ok.

    The run, turn and time come from *meta*, worker, channel and surface
    from *scope*, and the system part's hash from the last of *boundaries*
    (the end of system); what a failed compilation never reached stays unset.
    """
    return ContextRecord(
        kind=kind,
        status="ok" if error is None else "failed",
        run=meta.run,
        turn=meta.turn,
        at=meta.now,
        surface=scope.surface.value,
        worker=scope.worker,
        channel=scope.channel,
        policy=_POLICY,
        engine_fingerprint=engine_fingerprint,
        route_key=route_key,
        system_sha256=boundaries[-1].sha256 if boundaries else None,
        input_sha256=input_sha256,
        boundaries=boundaries,
        budget=budget,
        blocks=blocks,
        error=error,
        step=step,
        tools=tools,
        notes=notes,
    )


class CompileError(RosterError):
    """A failed compilation: a mandatory block is over its limit.

    There is no fallback prompt: the caller gets this error and the engine
    gets nothing. ``record`` is the trace of the failed compilation (every
    block rendered so far, the failed one included), ready to be written.
    """

    def __init__(
        self, *, block: str, size: int, limit: int, reason: str, record: ContextRecord | None = None
    ) -> None:
        super().__init__(
            f"block {block!r} is {size} characters, over its limit of {limit}: {reason}"
        )
        self.block = block
        self.size = size
        self.limit = limit
        self.reason = reason
        self.record = record
