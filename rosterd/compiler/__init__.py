"""The context compiler: pure functions from org, scope and store data to a prompt.

No IO happens here. The daemon loads the org and the stores, calls
``compile_system`` / ``compile_turn`` / ``compile_run``, writes the returned
trace record (or ``CompileError.record``) and only then calls an engine.
"""

from ._audit import DryRun, OverBudget, dry_run, over_budget
from ._envelopes import BLOCK_TYPES, render_line
from ._gates import GateIndex, GateView
from ._inputs import (
    ChannelMessage,
    Continuation,
    Gate,
    MemoryItem,
    RunMeta,
    Shown,
    ShownItems,
    TurnInput,
)
from ._memory import MemoryIndex, MemoryView, rank_memory
from ._policy import POLICY_SHA256, POLICY_TEXT, POLICY_VERSION
from ._shown import HeldMemo, ShownKind, shown_in
from ._stability import PrefixState, check_prefix, prefix_state
from ._system import SystemPrompt, compile_system, route_key
from ._tools import (
    GateRequest,
    Refusal,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolSpec,
    ToolStatus,
    check_call,
    compile_step,
    compile_tools,
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
    ContextRecord,
    FailureTrace,
    PolicyTrace,
    RecordKind,
    RolloverTrace,
)
from ._turn import Compilation, compile_run, compile_turn, iso_time

__all__ = (
    "BLOCK_TYPES",
    "POLICY_SHA256",
    "POLICY_TEXT",
    "POLICY_VERSION",
    "AlreadyShown",
    "BlockStatus",
    "BlockTrace",
    "Boundary",
    "BoundaryCheck",
    "BoundaryName",
    "BudgetTrace",
    "ChannelMessage",
    "Compilation",
    "ContextRecord",
    "Continuation",
    "DryRun",
    "FailureTrace",
    "Gate",
    "GateIndex",
    "GateRequest",
    "GateView",
    "HeldMemo",
    "MemoryIndex",
    "MemoryItem",
    "MemoryView",
    "OverBudget",
    "PolicyTrace",
    "PrefixState",
    "RecordKind",
    "Refusal",
    "RolloverTrace",
    "RunMeta",
    "Shown",
    "ShownItems",
    "ShownKind",
    "SystemPrompt",
    "ToolCall",
    "ToolRequest",
    "ToolResult",
    "ToolSpec",
    "ToolStatus",
    "TurnInput",
    "check_call",
    "check_prefix",
    "compile_run",
    "compile_step",
    "compile_system",
    "compile_tools",
    "compile_turn",
    "dry_run",
    "iso_time",
    "over_budget",
    "prefix_state",
    "rank_memory",
    "render_line",
    "render_result",
    "route_key",
    "shown_in",
    "tools_block",
)
