"""The reference pages name what the code has: every method, param, result
field, error code and org.toml key, and nothing the code does not have."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest
from harness import REPO

from rosterd import protocol
from rosterd.compiler import ChannelMessage
from rosterd.org import (
    ChannelConfig,
    ConnectionConfig,
    ContextBudget,
    DaemonConfig,
    EngineConfig,
    GatewayConfig,
    InspectConfig,
    MetricsConfig,
    PriceConfig,
    TelemetryConfig,
    WorkerConfig,
)
from rosterd.protocol import (
    TranscriptEntry,
    TurnRequest,
)

DOCS = REPO / "docs"


def _sections(path: Path, level: str) -> dict[str, str]:
    """Heading text (without backquotes) to the text under it, up to the next heading."""
    found: dict[str, str] = {}
    name: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            name = line[len(level) :].strip().strip("`") if line.startswith(level + " ") else None
            if name is not None:
                found[name] = ""
        elif name is not None:
            found[name] += line + "\n"
    return found


def _names(kind: type[msgspec.Struct]) -> set[str]:
    return {field.encode_name for field in msgspec.structs.fields(kind)}


def _mentioned(names: set[str], text: str) -> set[str]:
    return {name for name in names if f"`{name}`" in text}


METHODS = _sections(DOCS / "protocol.md", "###")


def test_every_method_has_a_section_and_every_section_is_a_method() -> None:
    assert set(METHODS) == set(protocol.METHODS)


@pytest.mark.parametrize("method", sorted(protocol.METHODS))
def test_every_param_of_a_method_is_documented(method: str) -> None:
    params = _names(protocol.METHODS[method])
    assert params - _mentioned(params, METHODS[method]) == set()


def _struct(kind: Any) -> type[msgspec.Struct]:
    """A method's declared result, or what its list holds."""
    args = get_args(kind)
    return args[0] if args else kind  # type: ignore[no-any-return]


# Fields left out of replies when unset, so the docs need not show them.
_UNSHOWN: dict[type[msgspec.Struct], set[str]] = {ChannelMessage: {"run"}}
# Each result's fields are documented with the first method (in declaration
# order) that returns it; another method returning it names that one.
_HOME: dict[type[msgspec.Struct], str] = {}
for _name, _kind in protocol.METHODS.items():
    _HOME.setdefault(_struct(_kind.result), _name)
# Every method's declared result, and the records two of them nest.
_RESULTS: list[tuple[str, type[msgspec.Struct], set[str]]] = [
    (name, _struct(kind.result), _UNSHOWN.get(_struct(kind.result), set()))
    for name, kind in protocol.METHODS.items()
] + [("runs.show", TranscriptEntry, set()), ("runs.context", TurnRequest, set())]


@pytest.mark.parametrize(
    ("method", "kind", "unshown"), _RESULTS, ids=[f"{m}:{k.__name__}" for m, k, _ in _RESULTS]
)
def test_every_result_field_is_documented(
    method: str, kind: type[msgspec.Struct], unshown: set[str]
) -> None:
    home = _HOME.get(kind, method)
    if home != method:
        assert f"`{home}`" in METHODS[method], f"{method} returns what `{home}` does"
    fields = _names(kind) - unshown
    assert fields - _mentioned(fields, METHODS[home]) == set()


def _table_codes(text: str) -> set[int]:
    return {int(code) for code in re.findall(r"^\| *(-?\d+) *\|", text, re.M)}


def test_the_error_table_lists_exactly_the_codes_the_protocol_defines() -> None:
    errors = _sections(DOCS / "protocol.md", "##")["Errors"]
    defined = {
        value
        for name, value in vars(protocol).items()
        if name.isupper()
        and isinstance(value, int)
        and (-32768 <= value <= -32000 or 1000 <= value <= 1999)
    }
    assert _table_codes(errors) == defined


def test_no_page_mentions_an_error_code_the_protocol_does_not_define() -> None:
    defined = {str(v) for v in vars(protocol).values() if isinstance(v, int)}
    for path in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        cited = set(re.findall(r"`(1\d{3})`|error (1\d{3})|code (1\d{3})", path.read_text()))
        assert {c for group in cited for c in group if c} <= defined, path.name


CONFIG = _sections(DOCS / "configuration.md", "##")
_TABLES: list[tuple[str, type[msgspec.Struct]]] = [
    ("[context]: budgets", ContextBudget),
    ("[engine]: which model answers", EngineConfig),
    ("[daemon]", DaemonConfig),
    ("[workers.<name>]", WorkerConfig),
    ("[channels.<id>]", ChannelConfig),
    ("[connections.<service>]", ConnectionConfig),
    ("[gateway]: where tool calls go", GatewayConfig),
    ("[metrics]: Prometheus", MetricsConfig),
    ("[telemetry]: OpenTelemetry traces", TelemetryConfig),
    ("[inspect]: the trace inspector", InspectConfig),
    ('[prices."<model>"]: what a call costs', PriceConfig),
]


def _rows(text: str) -> dict[str, list[str]]:
    """Key to the other cells of its row, for rows whose first cell is a `key`."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and re.fullmatch(r"`\w+`", cells[0]):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


@pytest.mark.parametrize(("section", "kind"), _TABLES, ids=[s for s, _ in _TABLES])
def test_every_org_toml_key_has_a_row_and_every_row_is_a_key(
    section: str, kind: type[msgspec.Struct]
) -> None:
    heading = next(h for h in CONFIG if h.replace("`", "") == section)
    assert set(_rows(CONFIG[heading])) == _names(kind)


def _table(page: str, section: str) -> dict[str, list[str]]:
    sections = _sections(DOCS / page, "##")
    return _rows(next(t for h, t in sections.items() if h.replace("`", "") == section))


_DEFAULTS = [
    ("configuration.md", "[context]: budgets", ContextBudget),
    ("configuration.md", "[daemon]", DaemonConfig),
    ("contract.md", "Budgets", ContextBudget),
]


@pytest.mark.parametrize(("page", "section", "kind"), _DEFAULTS, ids=[p for p, _, _ in _DEFAULTS])
def test_documented_numeric_defaults_are_the_code_defaults(
    page: str, section: str, kind: type[msgspec.Struct]
) -> None:
    rows = _table(page, section)
    checked = 0
    for field in msgspec.structs.fields(kind):
        if not isinstance(field.default, int | float) or isinstance(field.default, bool):
            continue
        # The default is the first cell that is a bare number.
        numbers = [c for c in rows[field.encode_name] if re.fullmatch(r"\d+(\.\d+)?", c)]
        assert numbers and float(numbers[0]) == field.default, field.encode_name
        checked += 1
    assert checked >= 5


def test_the_contracts_budget_table_is_every_budget() -> None:
    assert set(_table("contract.md", "Budgets")) == _names(ContextBudget)


@pytest.mark.parametrize(
    "method", sorted(name for name, kind in protocol.METHODS.items() if kind.notifications)
)
def test_every_notification_a_method_sends_is_documented(method: str) -> None:
    sent = set(protocol.METHODS[method].notifications)
    assert sent - _mentioned(sent, METHODS[method]) == set()
