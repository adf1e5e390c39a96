"""The context compiler: pure functions from org, scope and store data to a prompt.

No IO happens here. The daemon loads the org and the stores, calls
``compile_system`` / ``compile_turn`` / ``compile_run``, writes the returned
trace record (or ``CompileError.record``) and only then calls an engine.

Each block is rendered in ``_blocks``, which also holds the system part's
names and order (``SYSTEM_ORDER``), but for the tool blocks, which
``_tools`` renders with the tools it defines. The advisory blocks of the
input part are registered in ``_advisory`` (``ADVISORY``: each one's name,
source, shrink rule, order and fit; ``BlockName`` names every block), then
comes the request:

=============  ==============================================================
block          rendered by (``_blocks``)
=============  ==============================================================
identity       ``identity_block``
policy         ``policy_block``
connections    ``connections_block``
purpose        ``purpose_block``
scope          ``scope_block``
memory         ``memory_line``
briefing       ``continuation_line``, ``gate_line``, ``gates_omitted_line``
history        ``history_envelopes``
backlog        ``message_envelopes``, ``messages_omitted_line``
message, task  ``request_block``
tools          ``tools_block`` (``_tools``)
tool           ``render_result``, ``tool_block`` (``_tools``)
=============  ==============================================================

The rest:

- ``_system``: the system part's budget checks, assembly and cache
  boundaries; ``_turn``: the input part, each advisory block given room
  from what the total leaves.
- ``_trace``: the record types, and ``context_record``, the one builder of
  every record (system, turn, run, tool step, failure).
- ``_envelopes``: the JSON envelope types and their one-line encoding.
- ``_items``: the store records and run metadata the compiler reads;
  ``_inputs``: ``TurnInput``, one run's or turn's fresh input of them.
- ``_memory`` / ``_gates``: ranked and scoped views of the stores' items
  (``_terms``, ``_postings`` and ``_scoring``: memory's terms, index
  format and arithmetic);
  ``_shown``: what a session's conversation already holds; ``_tools``: tool
  definitions, call checks, ``compile_step`` and ``carried_step``;
  ``_stability``: prefix checks between compilations; ``_audit``: the dry
  run of every scope.
"""

from ._advisory import (
    ADVISORY,
    ADVISORY_ORDER,
    ROOM_ORDER,
    SHRINK_RULE,
    AdvisoryBlock,
    AdvisorySpec,
    BlockName,
)
from ._audit import DryRun, OverBudget, dry_run, over_budget
from ._blocks import (
    BLOCK_TYPES,
    REQUEST_BLOCKS,
    SYSTEM_ORDER,
    RequestBlock,
    SystemBlock,
    iso_time,
)
from ._envelopes import message_texts, render_line
from ._gates import GateIndex, GateView
from ._inputs import TurnInput
from ._items import (
    ChannelMessage,
    Continuation,
    Gate,
    MemoryItem,
    NoteAuthor,
    Retirement,
    RunMeta,
    Shown,
)
from ._memory import (
    CONTEXT_MESSAGES,
    MemoryIndex,
    MemoryRanking,
    MemoryView,
    Ranked,
    memory_view,
    rank_memory,
)
from ._policy import POLICY_SHA256, POLICY_TEXT, POLICY_VERSION
from ._shown import HeldMemo, ShownItems, ShownKind, held_note, shown_in
from ._stability import PrefixState, check_prefix, prefix_state
from ._system import SystemPrompt, compile_system, route_key
from ._tools import (
    NOTE_CHARS,
    ForgetRequest,
    GateRequest,
    NoteScope,
    Refusal,
    RememberRequest,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolSpec,
    ToolStatus,
    carried_step,
    check_call,
    compile_step,
    compile_tools,
    note_scopes,
    notes_written,
    render_result,
    tools_block,
)
from ._trace import (
    AlreadyShown,
    BlockStatus,
    BlockTrace,
    Boundary,
    BoundaryCheck,
    BoundaryName,
    BudgetTrace,
    CompileError,
    ContextRecord,
    FailureTrace,
    NoteReason,
    NoteTrace,
    PassedOver,
    PassOverReason,
    PolicyTrace,
    RecordKind,
    RolloverTrace,
    held_items,
)
from ._turn import Compilation, compile_run, compile_turn

__all__ = (
    "ADVISORY",
    "ADVISORY_ORDER",
    "BLOCK_TYPES",
    "CONTEXT_MESSAGES",
    "NOTE_CHARS",
    "POLICY_SHA256",
    "POLICY_TEXT",
    "POLICY_VERSION",
    "REQUEST_BLOCKS",
    "ROOM_ORDER",
    "SHRINK_RULE",
    "SYSTEM_ORDER",
    "AdvisoryBlock",
    "AdvisorySpec",
    "AlreadyShown",
    "BlockName",
    "BlockStatus",
    "BlockTrace",
    "Boundary",
    "BoundaryCheck",
    "BoundaryName",
    "BudgetTrace",
    "ChannelMessage",
    "Compilation",
    "CompileError",
    "ContextRecord",
    "Continuation",
    "DryRun",
    "FailureTrace",
    "ForgetRequest",
    "Gate",
    "GateIndex",
    "GateRequest",
    "GateView",
    "HeldMemo",
    "MemoryIndex",
    "MemoryItem",
    "MemoryRanking",
    "MemoryView",
    "NoteAuthor",
    "NoteReason",
    "NoteScope",
    "NoteTrace",
    "OverBudget",
    "PassOverReason",
    "PassedOver",
    "PolicyTrace",
    "PrefixState",
    "Ranked",
    "RecordKind",
    "Refusal",
    "RememberRequest",
    "RequestBlock",
    "Retirement",
    "RolloverTrace",
    "RunMeta",
    "Shown",
    "ShownItems",
    "ShownKind",
    "SystemBlock",
    "SystemPrompt",
    "ToolCall",
    "ToolRequest",
    "ToolResult",
    "ToolSpec",
    "ToolStatus",
    "TurnInput",
    "carried_step",
    "check_call",
    "check_prefix",
    "compile_run",
    "compile_step",
    "compile_system",
    "compile_tools",
    "compile_turn",
    "dry_run",
    "held_items",
    "held_note",
    "iso_time",
    "memory_view",
    "message_texts",
    "note_scopes",
    "notes_written",
    "over_budget",
    "prefix_state",
    "rank_memory",
    "render_line",
    "render_result",
    "route_key",
    "shown_in",
    "tools_block",
)
