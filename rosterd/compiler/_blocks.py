"""Every block of a prompt: its name, its place in the order, how it renders.

The system part is ``SystemBlock`` in order, stable to volatile, each block
wrapped as ``<name>\\n…\\n</name>\\n``. The input part is the advisory blocks
(``_advisory`` registers each), then the request (``RequestBlock``), one JSON
envelope per line. A tool loop adds ``tools`` (the definitions, on
``system`` and ``run`` records) and one ``tool`` block per result of a step. ``_system`` and
``_advisory`` decide what fits; what a block's bytes are is decided here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from operator import attrgetter
from typing import Literal, get_args

import msgspec

from ..org import Org, RunScope, Surface
from ._envelopes import (
    BriefingContinuation,
    BriefingGate,
    BriefingOmitted,
    Envelope,
    HistoryEnvelope,
    MemoryEnvelope,
    MessageEnvelope,
    MessagesOmitted,
    TaskEnvelope,
    escape_line_breaks,
    render_line,
)
from ._items import ChannelMessage, Continuation, RunMeta
from ._policy import POLICY_TEXT, POLICY_VERSION
from ._trace import (
    AlreadyShown,
    BlockStatus,
    BlockTrace,
    BoundaryName,
    NoteReason,
    PassedOver,
    sha256_text,
)

_canonical = msgspec.json.Encoder(order="deterministic")
_text = attrgetter("text")
_sender = attrgetter("sender")
_EMPTY_SHA256 = sha256_text("")

SystemBlock = Literal["identity", "policy", "connections", "purpose", "scope"]
RequestBlock = Literal["message", "task"]

SYSTEM_ORDER: tuple[SystemBlock, ...] = get_args(SystemBlock)
REQUEST_BLOCKS: tuple[RequestBlock, ...] = get_args(RequestBlock)
# The ``block`` tag an envelope line may carry: the backlog's lines are
# message envelopes, and tool results are envelopes of their own.
BLOCK_TYPES: frozenset[str] = frozenset(
    {"memory", "briefing", "history", "message", "task", "tool"}
)
# The cache boundary each of these blocks ends.
BOUNDARY_AFTER: Mapping[str, BoundaryName] = {
    "connections": "connections",
    "purpose": "purpose",
    "scope": "system",
}
# What a changed hash of a system block tells about its cause.
CHANGE_CAUSE: Mapping[str, str] = {
    "identity": "identity edited",
    "policy": "policy version changed",
    "connections": "connections changed",
    "purpose": "purpose edited",
    "scope": "surface changed",
}


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


# -- the system part: trusted text, wrapped whole ---------------------------


def identity_block(org: Org, worker: str) -> BlockTrace:
    return _trusted_block("identity", org.identities[worker], f"workers/{worker}/identity.md")


def policy_block() -> BlockTrace:
    return _POLICY_BLOCK


def connections_block(org: Org, worker: str) -> BlockTrace:
    """One canonical JSON line per connected service, sorted, then the usage note."""
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
        # The note is free text: a line break JSON leaves raw would split its line.
        lines.append(escape_line_breaks(_canonical.encode(entry).decode()))
    body = "\n".join([*lines, _CONNECTIONS_NOTE]) + "\n"
    block = _trusted_block("connections", body, f"org.toml [connections] {' '.join(names)}")
    return msgspec.structs.replace(block, items=len(names))


def purpose_block(org: Org, scope: RunScope) -> BlockTrace:
    """The channel's purpose.md, absent without a channel or file."""
    if scope.channel is None:
        return absent_block("purpose", "no channel")
    source = f"channels/{scope.channel}/purpose.md"
    text = org.purposes.get(scope.channel)
    return (
        absent_block("purpose", source) if text is None else _trusted_block("purpose", text, source)
    )


def scope_block(scope: RunScope) -> BlockTrace:
    """The host's framing of the surface: names only, nothing volatile."""
    text = _SCOPE_TEXT[scope.surface].format(
        worker=_canonical.encode(scope.worker).decode(),
        channel=_canonical.encode(scope.channel).decode(),
    )
    return _trusted_block("scope", text, f"host scope: {scope.surface.value}")


def absent_block(name: str, source: str) -> BlockTrace:
    return BlockTrace(
        block=name,
        source=source,
        status="absent",
        raw_chars=0,
        rendered_chars=0,
        limit=None,
        sha256=_EMPTY_SHA256,
        content="",
    )


def _trusted_block(name: SystemBlock, body: str, source: str) -> BlockTrace:
    rendered = f"<{name}>\n{body}{'' if body.endswith(chr(10)) else chr(10)}</{name}>\n"
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


_POLICY_BLOCK = _trusted_block("policy", POLICY_TEXT, f"rosterd policy v{POLICY_VERSION}")


# -- the input part: envelope lines, fitted by ``_turn`` --------------------


class Fitted(msgspec.Struct, frozen=True):
    """What fitting chose of an input block: its lines, their characters,
    envelopes kept and dropped, raw characters of the block's items, and the
    items left out because the conversation holds them (``held`` of them:
    all in ``already_shown``, or what changed, as ``BlockTrace`` says)."""

    lines: list[str]
    chars: int
    items: int
    omitted: int
    raw_chars: int
    already_shown: tuple[AlreadyShown, ...] = ()
    notes: tuple[NoteReason, ...] | None = None
    passed_over: tuple[PassedOver, ...] | None = None
    held: int = 0
    newly_held: tuple[AlreadyShown, ...] | None = None
    no_longer_held: tuple[str, ...] = ()


def request_block(scope: RunScope, text: str, sender: str, meta: RunMeta, limit: int) -> BlockTrace:
    """The message (from *sender*) or task, whole: it is never truncated."""
    at = iso_time(meta.now)
    name: RequestBlock
    if scope.surface is Surface.TASK:
        name, line = "task", render_line(TaskEnvelope(run=meta.run, at=at, text=text))
    else:
        name = "message"
        line = render_line(MessageEnvelope(sender=sender, at=at, text=text))
    fitted = Fitted([line], len(line), 1, 0, len(text))
    return input_block(name, f"rpc: {scope.surface.value}", fitted, limit)


def input_block(
    name: str, source: str, fitted: Fitted, limit: int, sha256: str | None = None
) -> BlockTrace:
    """*fitted*, block *name* of the input part, as traced; *sha256* is its
    content's, if already known."""
    total = fitted.items + fitted.omitted
    status: BlockStatus
    if total == 0:
        status = "absent"
    elif fitted.omitted == 0:
        status = "included"
    elif fitted.items == 0:
        status = "omitted"
    else:
        status = "shrunk"
    content = "".join(fitted.lines)
    return BlockTrace(
        block=name,
        source=source,
        status=status,
        raw_chars=fitted.raw_chars,
        rendered_chars=fitted.chars,
        limit=limit,
        sha256=sha256 or (sha256_text(content) if content else _EMPTY_SHA256),
        content=content,
        items=fitted.items,
        omitted=fitted.omitted,
        already_shown=fitted.already_shown,
        notes=fitted.notes,
        passed_over=fitted.passed_over,
        held=fitted.held,
        newly_held=fitted.newly_held,
        no_longer_held=fitted.no_longer_held,
    )


def iso_time(now: float) -> str:
    """*now* as UTC to the second it falls in, e.g. ``2023-11-14T22:13:20Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


class _LineCache:
    """Rendered lines by key, dropped all at once past *max_chars*: the
    stores hand the compiler the same items every turn, so each renders once
    while it is in memory, and a cache cannot change what a line is."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.lines: dict[tuple[str | None, ...], str] = {}
        self.chars = 0

    def put(self, key: tuple[str | None, ...], line: str) -> str:
        if self.chars + len(line) > self.max_chars:
            self.lines.clear()
            self.chars = 0
        self.lines[key] = line
        self.chars += len(line)
        return line


_memory_lines = _LineCache(4 * 1024 * 1024)
_gate_lines = _LineCache(1024 * 1024)


def memory_line(item_id: str, text: str) -> str:
    """A ``memory`` line: one note."""
    key = (item_id, text)
    line = _memory_lines.lines.get(key)
    if line is None:
        line = _memory_lines.put(key, render_line(MemoryEnvelope(id=item_id, text=text)))
    return line


def continuation_line(continuation: Continuation) -> str:
    """The ``briefing`` line a continuation run starts with."""
    c = continuation
    return render_line(
        BriefingContinuation(
            kind="continuation", gate=c.gate, summary=c.summary, outcome=c.outcome, note=c.note
        )
    )


def gate_line(gate: str, summary: str, outcome: str | None, note: str) -> str:
    """A ``briefing`` line of one gate: open without *outcome*, else resolved."""
    key = (gate, summary, outcome, note)
    line = _gate_lines.lines.get(key)
    if line is None:
        envelope: Envelope = (
            BriefingGate(kind="gate", gate=gate, summary=summary)
            if outcome is None
            else BriefingContinuation(
                kind="resolved", gate=gate, summary=summary, outcome=outcome, note=note
            )
        )
        line = _gate_lines.put(key, render_line(envelope))
    return line


def gates_omitted_line(gates: int) -> str:
    """The ``briefing`` line counting gates left out."""
    return render_line(BriefingOmitted(kind="omitted", gates=gates))


@lru_cache(maxsize=1024)
def gates_omitted_chars(gates: int) -> int:
    """The length of ``gates_omitted_line``, 0 for no gates."""
    # Asked once per gate line kept: a count's note renders once.
    return len(gates_omitted_line(gates)) if gates > 0 else 0


def history_envelopes(messages: Sequence[ChannelMessage]) -> list[Envelope]:
    """The ``history`` envelopes of *messages*."""
    return list(map(HistoryEnvelope, map(_sender, messages), map(_text, messages)))


def message_envelopes(messages: Sequence[ChannelMessage]) -> list[Envelope]:
    """The ``backlog``'s message envelopes of *messages*."""
    return [MessageEnvelope(m.sender, iso_time(m.at), m.text) for m in messages]


def messages_omitted_line(omitted: int) -> str:
    """The ``backlog`` line counting older messages left out."""
    return render_line(MessagesOmitted(omitted=omitted))
