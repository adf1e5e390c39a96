"""``roster check``: validate an org and dry-run every compilation it allows.

For every worker x channel it may run in x surface (session, task), and a
direct run per worker, the real compiler runs with empty stores and an
empty message (its envelope alone, the least a message or task can be), so
what is checked is exactly what the daemon would compile. The table shows
each block's rendered size against its limit and the total. Problems (an
unloadable org, a mandatory block over budget) are printed one per line on
stderr and make the exit status 1, so the command can gate a deploy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from .._errors import ConfigError
from ..compiler import REQUEST_BLOCKS, SYSTEM_ORDER, BlockTrace, dry_run
from ..org import Org, load_org
from ..pricing import price_for
from ._output import emit_json, table


class CheckedBlock(msgspec.Struct, frozen=True):
    block: str
    status: str
    chars: int
    limit: int | None


class CheckedRun(msgspec.Struct, frozen=True):
    worker: str
    channel: str | None
    surface: str
    ok: bool
    blocks: list[CheckedBlock]
    used: int | None
    total: int
    error: str | None = None


class CheckReport(msgspec.Struct, frozen=True):
    org: str
    ok: bool
    runs: list[CheckedRun]
    problems: list[str]
    # Not problems: the org works, but something in it is worth a look.
    warnings: list[str] = []


def check_org(root: Path) -> CheckReport:
    try:
        org = load_org(root)
    except ConfigError as exc:
        return CheckReport(org=str(root), ok=False, runs=[], problems=[str(exc)])
    runs: list[CheckedRun] = []
    # One line per distinct problem, naming every compilation it breaks.
    problems: dict[str, list[str]] = {}
    for run in dry_run(org):
        scope = run.scope
        runs.append(
            CheckedRun(
                worker=scope.worker,
                channel=scope.channel,
                surface=scope.surface.value,
                ok=run.error is None,
                blocks=_blocks(run.blocks),
                used=run.used,
                total=org.budget_for(scope.worker).total,
                error=str(run.error) if run.error is not None else None,
            )
        )
        if run.error is not None:
            where = f"{scope.worker} {scope.surface.value}"
            where += f" #{scope.channel}" if scope.channel else ""
            problems.setdefault(f"{run.source}: {run.error}", []).append(where)
    lines = [f"{problem} [{', '.join(where)}]" for problem, where in problems.items()]
    return CheckReport(
        org=str(root), ok=not lines, runs=runs, problems=lines, warnings=_unpriced(org)
    )


def _unpriced(org: Org) -> list[str]:
    """The models whose calls would cost "unknown": no price in the library
    nor in ``[prices]``."""
    engines = org.named_engines()
    for name in org.workers:
        engines.setdefault(f"workers.{name}.engine", org.engine_for(name))
    missing: dict[str, list[str]] = {}
    for where, config in engines.items():
        if price_for(config, org.prices.get(config.model)) is None:
            missing.setdefault(config.model, []).append(where)
    return [
        f"model {model!r} has no price, so its calls cost 'unknown': add "
        f'[prices."{model}"] with input and output (USD per million tokens) [{", ".join(where)}]'
        for model, where in missing.items()
    ]


def _blocks(traces: tuple[BlockTrace, ...]) -> list[CheckedBlock]:
    return [CheckedBlock(t.block, t.status, t.rendered_chars, t.limit) for t in traces]


def _cell(blocks: dict[str, CheckedBlock], name: str) -> str:
    block = blocks.get(name)
    if block is None:
        return "-"
    if block.status == "absent":
        return "absent"
    size = f"{block.chars}/{block.limit}" if block.limit is not None else str(block.chars)
    return f"{size} OVER" if block.status == "failed" else size


def render(report: CheckReport) -> str:
    rows = []
    for run in report.runs:
        blocks = {b.block: b for b in run.blocks}
        request = next((blocks[name] for name in REQUEST_BLOCKS if name in blocks), None)
        used = f"{run.used}/{run.total}" if run.used is not None else f"-/{run.total}"
        left = run.total - run.used if run.used is not None else None
        rows.append(
            (
                run.worker,
                f"#{run.channel}" if run.channel else "-",
                run.surface,
                *(_cell(blocks, name) for name in SYSTEM_ORDER),
                _cell(blocks, request.block) if request is not None else "-",
                used,
                left,
                "ok" if run.ok else "FAILED",
            )
        )
    headers = (
        "WORKER",
        "CHANNEL",
        "SURFACE",
        *(name.upper() for name in SYSTEM_ORDER),
        "REQUEST",
        "USED/TOTAL",
        "LEFT",
        "RESULT",
    )
    if not rows:
        return f"org {report.org}: cannot be loaded"
    lines = [
        f"org {report.org}: {len(report.runs)} compilations (chars, size/limit)",
        table(headers, rows),
    ]
    lines.append(
        "ok: every compilation fits its budgets"
        if report.ok
        else f"{len(report.problems)} problem(s)"
    )
    return "\n".join(lines)


def check(root: Path, as_json: bool) -> int:
    report = check_org(root)
    if as_json:
        emit_json(report)
    else:
        print(render(report))
    for problem in report.problems:
        print(f"roster: {problem}", file=sys.stderr)
    for warning in report.warnings:
        print(f"roster: warning: {warning}", file=sys.stderr)
    return 0 if report.ok else 1
