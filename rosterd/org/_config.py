"""The schema of org.toml, as msgspec Structs.

Every section forbids unknown fields so that a typo fails loudly instead of
being silently ignored. Budgets are characters as the model receives them.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

Chars = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(ge=1)]
# The longest duration a ``*_s`` key takes: a week. No timeout, drain, lease,
# cooldown or idle period needs more, and a value past it is a mistake, such
# as milliseconds written as seconds or ``inf`` meant as "never": a deadline
# that far is none at all. TOML's ``nan`` fails every comparison, so ``gt``
# refuses it.
MAX_SECONDS = 604800.0
Seconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_SECONDS)]
# Each task worker is a task of its own that looks for work in the store;
# past this many, the engines' limits decide how many runs go at once.
MAX_TASK_WORKERS = 1024
# Retries of one engine call: with the backoff's 8 s cap, 100 wait about ten
# minutes, past which the provider is down and a fallback or the breaker is
# the answer. The backoff doubles per attempt and overflows a float past 1023.
MAX_RETRIES = 100
Retries = Annotated[int, msgspec.Meta(ge=0, le=MAX_RETRIES)]
EnvName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
HttpMethod = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
EngineKind = Literal["echo", "openai", "anthropic"]
CacheTtlChoice = Literal["auto", "5m", "1h"]
PromptCacheChoice = Literal["auto", "implicit", "explicit"]
# Models that take OpenAI's explicit caching contract (prompt_cache_options,
# breakpoints, billed writes): the gpt-5.6 family and later.
EXPLICIT_CACHE_MODELS = ("gpt-5.[6-9]*", "gpt-[6-9]*", "gpt-[1-9][0-9]*")
# Models that keep an implicit prefix up to 24 hours on request.
RETENTION_MODELS = ("gpt-4.1*", "gpt-5*", "gpt-[6-9]*", "gpt-[1-9][0-9]*")
# Keys that only one kind of engine takes.
PROVIDER_KEYS = {
    "cache_ttl": "anthropic",
    "diagnose_cache": "anthropic",
    "prompt_cache": "openai",
    "explicit_cache_models": "openai",
    "retention_models": "openai",
}
# The built-in tools a worker has besides one per connection: rosterd
# answers these itself, so no connection may take their names.
FILE_GATE = "file_gate"
REMEMBER = "remember"
FORGET = "forget"
BUILTIN_TOOLS = (FILE_GATE, REMEMBER, FORGET)
# What notes a worker may write with ``remember``: its run's channel only,
# also worker-wide ones, or none (no memory tools at all).
MemoryScope = Literal["channel", "worker", "off"]


class ContextBudget(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[context]``: the character budgets of one compilation (docs/contract.md, Budgets)."""

    total: Positive = 48000
    identity: Chars = 12000
    purpose: Chars = 8000
    briefing: Chars = 4000
    task: Chars = 24000
    memory: Chars = 8000
    history_messages: Chars = 25
    history: Chars = 6000
    # Messages others posted in the channel since a session's previous turn.
    backlog_messages: Chars = 50
    backlog: Chars = 8000
    # A session whose next request would pass this rolls over to a new one.
    session_chars: Positive = 200000
    # One tool result envelope as rendered; a longer result is cut, with a count.
    tool_result: Positive = 4000


def _overlay(base: type[msgspec.Struct], name: str, doc: str) -> type[msgspec.Struct]:
    """A table of *base*'s keys, each optional: what one worker sets over it."""
    fields = [(field.name, field.type | None, None) for field in msgspec.structs.fields(base)]
    return msgspec.defstruct(
        name,
        fields,
        forbid_unknown_fields=True,
        frozen=True,
        module=__name__,
        namespace={"__doc__": doc},
    )


if TYPE_CHECKING:
    # Read generically (``Org.budget_for``): no key is named in code.
    class ContextOverlay(msgspec.Struct, frozen=True):
        pass

else:
    # Derived, so a budget key is added in one place, ``ContextBudget``.
    ContextOverlay = _overlay(
        ContextBudget,
        "ContextOverlay",
        "``[workers.<name>.context]``: any budget of ``[context]``, for one worker.",
    )


class EngineConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[engine]`` and each ``[engines.<name>]``: which model answers, and how
    to reach it; ``fallback`` names the engines that answer when it cannot."""

    kind: EngineKind = "echo"
    model: str = ""
    base_url: str = ""
    api_key_env: EnvName | None = None
    max_tokens: Positive = 1024
    timeout_s: Seconds = 60.0
    max_retries: Retries = 3
    cache_min_tokens: Chars = 1024
    # Named [engines.*] to try, in order, when this one cannot answer.
    fallback: tuple[str, ...] = ()
    # Calls at once, and per minute, this daemon sends; None: no limit.
    max_inflight: Positive | None = None
    requests_per_minute: Positive | None = None
    input_tokens_per_minute: Positive | None = None
    # Failed calls in a row that open the breaker, and for how long.
    breaker_failures: Positive = 5
    breaker_cooldown_s: Seconds = 30.0
    # Anthropic: how long the provider keeps a session's prefix cached;
    # None is "auto", chosen per session from the gaps between its turns.
    cache_ttl: CacheTtlChoice | None = None
    # Anthropic: ask the provider why a cache was missed (a beta).
    diagnose_cache: bool | None = None
    # OpenAI: implicit or explicit caching; None is "auto", explicit on
    # explicit_cache_models when it pays, implicit elsewhere.
    prompt_cache: PromptCacheChoice | None = None
    explicit_cache_models: tuple[str, ...] | None = None
    retention_models: tuple[str, ...] | None = None


class EngineOverlay(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[workers.<name>.engine]``: any key of ``[engine]``, for one worker,
    over ``[engine]`` or over the named engine ``use`` picks."""

    kind: EngineKind | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: EnvName | None = None
    max_tokens: Positive | None = None
    timeout_s: Seconds | None = None
    max_retries: Retries | None = None
    cache_min_tokens: Chars | None = None
    fallback: tuple[str, ...] | None = None
    max_inflight: Positive | None = None
    requests_per_minute: Positive | None = None
    input_tokens_per_minute: Positive | None = None
    breaker_failures: Positive | None = None
    breaker_cooldown_s: Seconds | None = None
    cache_ttl: CacheTtlChoice | None = None
    diagnose_cache: bool | None = None
    prompt_cache: PromptCacheChoice | None = None
    explicit_cache_models: tuple[str, ...] | None = None
    retention_models: tuple[str, ...] | None = None
    # A named [engines.*] table to start from instead of [engine].
    use: str | None = None

    def over(self, base: EngineConfig) -> EngineConfig:
        """*base* with this overlay's keys over it (``use`` picks *base*)."""
        changes = {
            f: v
            for f in self.__struct_fields__
            if f != "use" and (v := getattr(self, f)) is not None
        }
        return msgspec.structs.replace(base, **changes)


class DaemonConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[daemon]``: session lifetime, who may connect, and capacity limits."""

    session_idle_s: Seconds = 900.0
    allow_uids: list[Annotated[int, msgspec.Meta(ge=0)]] | None = None
    allow_gids: list[Annotated[int, msgspec.Meta(ge=0)]] = []
    task_workers: Annotated[int, msgspec.Meta(ge=1, le=MAX_TASK_WORKERS)] = 4
    max_connections: Positive = 1024
    drain_s: Seconds = 30.0
    send_timeout_s: Seconds = 10.0
    # A connection that has not sent a complete line for this long is closed.
    idle_timeout_s: Seconds = 60.0
    # None: a quarter of max_connections, so one uid cannot take every slot.
    max_connections_per_uid: Positive | None = None
    # A session turn or task run holds a lease, renewed while it goes on;
    # a host that dies lets another take over once this much has passed.
    lease_s: Annotated[float, msgspec.Meta(ge=1.0, le=MAX_SECONDS)] = 30.0


class GatewayConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[gateway]``: where tool calls go; rosterd never executes one itself.

    Without ``socket`` every call gets a refusal result. ``max_steps`` bounds
    the engine calls of one turn, the first included.
    """

    socket: str | None = None
    timeout_s: Seconds = 30.0
    max_steps: Positive = 8


# The highest rate a ``[prices]`` key takes, in USD per million tokens: a
# dollar a token, far above any model's. A bill at ``inf`` or ``nan`` (TOML
# has both) is no number JSON holds: the call's transcript entry would not
# read back, and its cost would be lost from ``stats cost``.
MAX_USD_PER_MTOK = 1_000_000.0
Usd = Annotated[float, msgspec.Meta(ge=0, le=MAX_USD_PER_MTOK)]


class PriceConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[prices."<model>"]``: USD per million tokens, over the price library's.

    ``cache_write_5m`` and ``cache_write_1h`` are Anthropic's two cache
    lifetimes; ``cache_write`` a write with no lifetime split (OpenAI's).
    """

    input: Usd | None = None
    cached_input: Usd | None = None
    cache_write_5m: Usd | None = None
    cache_write_1h: Usd | None = None
    cache_write: Usd | None = None
    output: Usd | None = None


class MetricsConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[metrics]``: where Prometheus scrapes ``/metrics``; off without ``listen``.

    ``listen`` is ``HOST:PORT`` (``[::1]:PORT`` for IPv6). An address that is
    not loopback needs ``allow_remote = true``, so metrics are never
    published by accident.
    """

    listen: str | None = None
    allow_remote: bool = False

    def __post_init__(self) -> None:
        if self.listen is None:
            return
        host, _ = listen_address(self.listen)
        if not self.allow_remote and not is_loopback(host):
            raise ValueError(
                f"listen = {self.listen!r} is not a loopback address: "
                "set allow_remote = true to publish metrics beyond this host"
            )


class InspectConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[inspect]``: the daemon also serves the trace inspector; off without
    ``listen``. Off loopback, ``token_file`` (an absolute path, or one
    relative to the org directory) must name the file holding its token."""

    listen: str | None = None
    token_file: str | None = None

    def __post_init__(self) -> None:
        if self.listen is None:
            return
        host, _ = listen_address(self.listen)
        if self.token_file is None and not is_loopback(host):
            raise ValueError(
                f"listen = {self.listen!r} is not a loopback address: set token_file, "
                "so that only those who hold the token read the runs"
            )


class TelemetryConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[telemetry]``: OpenTelemetry traces over OTLP/HTTP.

    On when ``otlp_endpoint`` is set (the collector's base URL; traces go
    to ``/v1/traces`` under it), or when the daemon's environment sets
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``.
    Message text is exported only with ``capture_content``.
    """

    otlp_endpoint: str | None = None
    capture_content: bool = False
    # None: $OTEL_SERVICE_NAME, else "rosterd".
    service_name: str | None = None
    timeout_s: Seconds = 10.0

    def __post_init__(self) -> None:
        if self.otlp_endpoint is not None and not self.otlp_endpoint.startswith(
            ("http://", "https://")
        ):
            raise ValueError(
                f"otlp_endpoint = {self.otlp_endpoint!r} must be an http:// or https:// URL"
            )


def listen_address(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``[V6]:PORT``) as host and port; ``ValueError`` if it is not one."""
    host, colon, port = listen.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen = {listen!r} must be HOST:PORT, e.g. 127.0.0.1:9464")
    return host, int(port)


# The fewest characters an inspector's token may have.
TOKEN_CHARS = 16


def read_token(path: Path) -> str:
    """The inspector's token in the file *path*, stripped; ``ValueError``
    says why it cannot be used (the file cannot be read, or the token is
    shorter than ``TOKEN_CHARS``), for the caller to name its source."""
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None
    if len(token) < TOKEN_CHARS:
        raise ValueError(f"a token of {TOKEN_CHARS} characters or more")
    return token


def is_loopback(host: str) -> bool:
    """Whether *host* (a name or an address) names only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WorkerConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[workers.<name>]``; the identity lives in workers/<name>/identity.md."""

    connections: list[str] = []
    context: ContextOverlay = ContextOverlay()
    engine: EngineOverlay = EngineOverlay()
    memory_scope: MemoryScope = "channel"
    # Notes one turn may write; a call past it is refused.
    remember_per_turn: Chars = 5


class ChannelConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[channels.<id>]``; the optional purpose lives in channels/<id>/purpose.md."""

    workers: list[str] = []


class ConnectionConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``[connections.<service>]``: what a worker may reach, never a secret value."""

    hosts: list[str]
    methods: list[HttpMethod] = msgspec.field(default_factory=lambda: ["GET"])
    env: EnvName | None = None
    note: str = ""
