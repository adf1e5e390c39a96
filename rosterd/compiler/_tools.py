"""Tools: what a worker may call, and how results come back as data.

A worker gets one tool per connection, whose schema admits only that
connection's hosts and methods, and the built-in ``file_gate``. Definitions
are rendered canonically (sorted keys, fixed order) and belong to the frozen
system part: both APIs cache tools before the system prompt, so a session
keeps them unchanged to its end.

Model output is untrusted: ``check_call`` validates every call against the
definitions the model was given before anything leaves rosterd. Each result
becomes one ``tool`` envelope, cut to ``[context] tool_result`` with a count
of what was cut; ``compile_step`` traces the results of one tool step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from ..org import FILE_GATE, Org, RunScope, Surface
from ._blocks import render_result, tool_block
from ._inputs import RunMeta
from ._trace import BlockTrace, ContextRecord, context_record, sha256_text

__all__ = (
    "GateRequest",
    "Refusal",
    "ToolCall",
    "ToolRequest",
    "ToolResult",
    "ToolSpec",
    "ToolStatus",
    "check_call",
    "compile_step",
    "compile_tools",
)

ToolStatus = Literal["ok", "refused", "error", "timeout"]
_PATH_CHARS = 2048
_SUMMARY_CHARS = 2000
_canonical = msgspec.json.Encoder(order="deterministic")


class ToolSpec(msgspec.Struct, frozen=True):
    """One tool as the model sees it; ``schema`` is its canonical JSON input schema.

    ``connection`` is ``None`` for ``file_gate``; the hosts and methods are
    those the schema admits, so a call is checked against what the model saw.
    """

    name: str
    connection: str | None
    description: str
    schema: str
    hosts: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()


class ToolCall(msgspec.Struct, frozen=True):
    """A call as the model made it: ``arguments`` is its raw JSON text, unchecked."""

    id: str
    name: str
    arguments: str


class ToolRequest(msgspec.Struct, frozen=True):
    """A call that passed validation: what the gateway is asked to do."""

    connection: str
    method: str
    host: str
    path: str
    query: dict[str, str]
    body: str | None


class GateRequest(msgspec.Struct, frozen=True):
    summary: str


class Refusal(msgspec.Struct, frozen=True):
    """A call rosterd answers itself, without the gateway."""

    status: Literal["refused", "error"]
    text: str


class ToolResult(msgspec.Struct, frozen=True):
    """The outcome of one call, before it is rendered as an envelope."""

    call: str
    connection: str
    status: ToolStatus
    text: str


class _RequestArgs(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    method: str
    host: str
    path: str
    query: dict[str, str] = {}
    body: str | None = None


class _GateArgs(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    summary: str


_decode_request = msgspec.json.Decoder(_RequestArgs).decode
_decode_gate = msgspec.json.Decoder(_GateArgs).decode


def compile_tools(org: Org, worker: str) -> tuple[ToolSpec, ...]:
    """The worker's tools: its connections sorted by name, then ``file_gate``."""
    tools = []
    for name in sorted(set(org.workers[worker].connections)):
        connection = org.connections[name]
        hosts = tuple(sorted(set(connection.hosts)))
        methods = tuple(sorted(set(connection.methods)))
        schema = {
            "type": "object",
            "properties": {
                "method": {"type": "string", "enum": list(methods)},
                "host": {"type": "string", "enum": list(hosts)},
                "path": {
                    "type": "string",
                    "pattern": "^/",
                    "maxLength": _PATH_CHARS,
                    "description": "the request path, starting with /",
                },
                "query": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "query parameters",
                },
                "body": {"type": "string", "description": "the request body as text"},
            },
            "required": ["method", "host", "path"],
            "additionalProperties": False,
        }
        credential = f" and injects ${connection.env}" if connection.env else ""
        description = (
            f"An HTTP request to the {name} connection, sent through the host's gateway, "
            f"which decides whether it is allowed{credential}. {connection.note}"
        ).strip()
        tools.append(
            ToolSpec(
                name=name,
                connection=name,
                description=description,
                schema=_canonical.encode(schema).decode(),
                hosts=hosts,
                methods=methods,
            )
        )
    gate_schema = {
        "type": "object",
        "properties": {
            "summary": {
                "type": "string",
                "minLength": 1,
                "maxLength": _SUMMARY_CHARS,
                "description": "the question a person must decide",
            }
        },
        "required": ["summary"],
        "additionalProperties": False,
    }
    tools.append(
        ToolSpec(
            name=FILE_GATE,
            connection=None,
            description=(
                "File a gate: a question for a person when you are blocked on a human "
                "decision. A task run pauses until it is resolved; its outcome comes back "
                "in a briefing."
            ),
            schema=_canonical.encode(gate_schema).decode(),
        )
    )
    return tuple(tools)


def check_call(tools: Sequence[ToolSpec], call: ToolCall) -> ToolRequest | GateRequest | Refusal:
    """Validate *call* against the tool it names; never raises."""
    tool = next((t for t in tools if t.name == call.name), None)
    if tool is None:
        names = ", ".join(t.name for t in tools)
        return Refusal("error", f"no tool named {call.name!r}; the tools are: {names}")
    if tool.connection is None:
        try:
            gate = _decode_gate(call.arguments or "{}")
        except msgspec.DecodeError as exc:
            return Refusal("error", f"malformed arguments for {tool.name}: {exc}")
        summary = gate.summary.strip()
        if not summary or len(summary) > _SUMMARY_CHARS:
            return Refusal("error", f"summary must be 1 to {_SUMMARY_CHARS} characters")
        return GateRequest(summary=summary)
    try:
        args = _decode_request(call.arguments or "{}")
    except msgspec.DecodeError as exc:
        return Refusal("error", f"malformed arguments for {tool.name}: {exc}")
    if args.method not in tool.methods:
        return Refusal(
            "refused",
            f"method {args.method!r} is not allowed on {tool.name}; allowed: "
            f"{', '.join(tool.methods)}",
        )
    if args.host not in tool.hosts:
        return Refusal(
            "refused",
            f"host {args.host!r} is not part of {tool.name}; allowed: {', '.join(tool.hosts)}",
        )
    if (
        not args.path.startswith("/")
        or len(args.path) > _PATH_CHARS
        or not args.path.isprintable()
        or " " in args.path
    ):
        return Refusal(
            "error", f"path must start with / and be at most {_PATH_CHARS} printable characters"
        )
    return ToolRequest(
        connection=tool.name,
        method=args.method,
        host=args.host,
        path=args.path,
        query=args.query,
        body=args.body,
    )


def compile_step(
    first: ContextRecord,
    results: Sequence[ToolResult],
    limit: int,
    meta: RunMeta,
    step: int,
) -> tuple[list[str], ContextRecord]:
    """The tool messages of step *step* and its trace record, one block per result.

    *first* is the turn's own record (``turn`` or ``run``), whose run facts the
    step shares: run, turn, worker, channel, engine, route key, boundaries.
    """
    lines: list[str] = []
    blocks: list[BlockTrace] = []
    for result in results:
        line, cut = render_result(result, limit)
        lines.append(line)
        blocks.append(tool_block(result, line, cut, limit))
    record = context_record(
        "step",
        RunScope(Surface(first.surface), first.worker, first.channel),
        RunMeta(run=first.run, turn=first.turn, now=meta.now),
        first.engine_fingerprint,
        tuple(blocks),
        route_key=first.route_key,
        system_sha256=first.system_sha256,
        input_sha256=sha256_text("".join(lines)),
        boundaries=first.boundaries,
        step=step,
    )
    return lines, record
