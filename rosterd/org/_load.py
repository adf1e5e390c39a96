"""Reading an org directory from disk into a validated ``Org``.

Every problem becomes a ``ConfigError`` that names the file, the key and what
was expected. Ids are checked before they are joined into a path, and no file
may resolve outside the org directory (a symlink pointing out is refused).
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from .._errors import ConfigError, InvalidIdError
from .._ids import check_id
from ._config import (
    BUILTIN_TOOLS,
    PROVIDER_KEYS,
    ChannelConfig,
    ConnectionConfig,
    EngineConfig,
    PriceConfig,
    WorkerConfig,
)
from ._org import DEFAULT_ENGINE, Org

_T = TypeVar("_T")
# What tells an edit of a file: its modification time (ns), size and inode
# (a file saved over by rename is another inode, even at the same time).
Stamp = tuple[int, int, int]
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_UNKNOWN_FIELD = re.compile(r"Object contains unknown field `(.*)`")
# The largest file of an org: far above any budget, so a file this big is a
# mistake (a log or a disk image copied in), which is not read into memory.
MAX_FILE_BYTES = 16 * 1024 * 1024
# Each top-level key of org.toml is a field of ``Org``. A Struct field is one
# table (``[context]``); the tables of named entries, whose names are ids of
# their kind, and ``[prices]``, keyed by model name, are read as below.
_TABLES: dict[str, type[Any]] = {
    field.name: field.type
    for field in msgspec.structs.fields(Org)
    if isinstance(field.type, type) and issubclass(field.type, msgspec.Struct)
}
_NAMED_TABLES: dict[str, tuple[str, type[Any]]] = {
    "workers": ("worker", WorkerConfig),
    "channels": ("channel", ChannelConfig),
    "connections": ("connection", ConnectionConfig),
    "engines": ("engine", EngineConfig),
}


def identity_path(root: Path, worker: str) -> Path:
    return root / "workers" / check_id("worker", worker) / "identity.md"


def purpose_path(root: Path, channel: str) -> Path:
    return root / "channels" / check_id("channel", channel) / "purpose.md"


def stamp(path: Path) -> Stamp | None:
    """*path*'s modification time, size and inode, or ``None`` when it is not there."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size, info.st_ino)


def load_org(root: Path, stamps: dict[str, Stamp | None] | None = None) -> Org:
    """Load and validate ``root/org.toml`` and the files it refers to.

    With *stamps*, the stamp of each file it goes to read is entered there,
    taken before the read (also when the load then fails): an edit that
    lands during or after the read changes the file's stamp from this one,
    so whoever compares stamps later sees it, never a text it did not read.
    """
    root = root.resolve()
    stamps = {} if stamps is None else stamps
    toml_path = root / "org.toml"
    raw = _read_text(root, toml_path, stamps, required=True)
    assert raw is not None
    try:
        data = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{toml_path}: invalid TOML: {exc}", path=str(toml_path)) from None
    except RecursionError:
        # tomllib recurses per level of nested arrays and inline tables.
        raise ConfigError(
            f"{toml_path}: invalid TOML: arrays or tables nested too deeply", path=str(toml_path)
        ) from None

    sections: dict[str, Any] = {}
    for key, value in data.items():
        if key in _TABLES:
            sections[key] = _convert(value, _TABLES[key], toml_path, key)
        elif key == "prices":
            # Keyed by model name, which need not be an id ("org/model").
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{toml_path}: [prices] must be a table", path=str(toml_path), key=key
                )
            sections[key] = {
                model: _convert(row, PriceConfig, toml_path, f"prices.{model}")
                for model, row in sorted(value.items())
            }
        elif key in _NAMED_TABLES:
            kind, struct = _NAMED_TABLES[key]
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{toml_path}: [{key}] must be a table", path=str(toml_path), key=key
                )
            sections[key] = {
                _checked_name(kind, name, toml_path, f"{key}.{name}"): _convert(
                    entry, struct, toml_path, f"{key}.{name}"
                )
                for name, entry in sorted(value.items())
            }
        else:
            raise ConfigError(
                f"{toml_path}: unknown key {key!r}; expected one of "
                f"{', '.join(sorted([*_TABLES, *_NAMED_TABLES, 'prices']))}",
                path=str(toml_path),
                key=key,
            )

    workers: dict[str, WorkerConfig] = sections.get("workers", {})
    channels: dict[str, ChannelConfig] = sections.get("channels", {})
    connections: dict[str, ConnectionConfig] = sections.get("connections", {})
    engines: dict[str, EngineConfig] = sections.get("engines", {})
    _check_references(toml_path, workers, channels, connections)
    _check_engines(toml_path, sections.get("engine", EngineConfig()), engines, workers)
    _check_tool_names(toml_path, connections)

    identities: dict[str, str] = {}
    for name in workers:
        text = _read_text(root, identity_path(root, name), stamps, required=True)
        assert text is not None
        identities[name] = text
    purposes: dict[str, str] = {}
    for channel in channels:
        text = _read_text(root, purpose_path(root, channel), stamps, required=False)
        if text is not None:
            purposes[channel] = text

    return Org(**sections, identities=identities, purposes=purposes)


def _convert(value: object, struct: type[_T], path: Path, where: str) -> _T:
    try:
        return msgspec.convert(value, type=struct)
    except msgspec.ValidationError as exc:
        # msgspec reports locations as `$.field`; name the TOML key instead.
        message, _, at = str(exc).partition(" - at `$")
        key = where + at.rstrip("`")
        unknown = _UNKNOWN_FIELD.fullmatch(message)
        if unknown is not None:
            key = f"{key}.{unknown[1]}"
            message = "unknown key"
        raise ConfigError(f"{path}: `{key}`: {message}", path=str(path), key=key) from None


def _checked_name(kind: str, name: str, path: Path, where: str) -> str:
    try:
        return check_id(kind, name)
    except InvalidIdError as exc:
        raise ConfigError(f"{path}: [{where}] {exc}", path=str(path), key=where) from None


def _check_tool_names(path: Path, connections: dict[str, ConnectionConfig]) -> None:
    # Each connection is offered to the model as a tool of the same name;
    # both APIs allow only these characters in a tool name.
    for name in connections:
        if not _TOOL_NAME.fullmatch(name) or name in BUILTIN_TOOLS:
            builtin = ", ".join(repr(tool) for tool in BUILTIN_TOOLS)
            raise ConfigError(
                f"{path}: [connections.{name}] names a tool: use letters, digits, '_' "
                f"and '-' only, and none of the built-in tools' names ({builtin})",
                path=str(path),
                key=f"connections.{name}",
            )


def _check_references(
    path: Path,
    workers: dict[str, WorkerConfig],
    channels: dict[str, ChannelConfig],
    connections: dict[str, ConnectionConfig],
) -> None:
    for name, worker in workers.items():
        _check_named(path, f"workers.{name}.connections", worker.connections, connections)
    for channel_id, channel in channels.items():
        _check_named(path, f"channels.{channel_id}.workers", channel.workers, workers)


def _check_engines(
    path: Path,
    default: EngineConfig,
    engines: dict[str, EngineConfig],
    workers: dict[str, WorkerConfig],
) -> None:
    """Every engine a worker uses, and every fallback, is an [engines.*] table;
    a caching key is set only on an engine that has it."""
    if DEFAULT_ENGINE in engines:
        raise ConfigError(
            f"{path}: [engines.{DEFAULT_ENGINE}]: that name is the unnamed [engine]'s; "
            "name it otherwise",
            path=str(path),
            key=f"engines.{DEFAULT_ENGINE}",
        )
    configs = {"engine": default, **{f"engines.{name}": e for name, e in engines.items()}}
    for name, worker in workers.items():
        base = default if worker.engine.use is None else engines.get(worker.engine.use, default)
        configs[f"workers.{name}.engine"] = worker.engine.over(base)
    for where, config in configs.items():
        _check_reachable(path, where, config)
        for key, kind in PROVIDER_KEYS.items():
            if getattr(config, key) is not None and config.kind != kind:
                raise ConfigError(
                    f"{path}: `{where}.{key}`: only an {kind} engine takes it, not {config.kind!r}",
                    path=str(path),
                    key=f"{where}.{key}",
                )
    _check_named(path, "engine.fallback", default.fallback, engines, "engines")
    for name, engine in engines.items():
        _check_named(path, f"engines.{name}.fallback", engine.fallback, engines, "engines")
    for name, worker in workers.items():
        overlay = worker.engine
        where = f"workers.{name}.engine"
        if overlay.use is not None:
            _check_named(path, f"{where}.use", (overlay.use,), engines, "engines")
        if overlay.fallback is not None:
            _check_named(path, f"{where}.fallback", overlay.fallback, engines, "engines")


def _check_reachable(path: Path, where: str, config: EngineConfig) -> None:
    """A provider engine names its model, and its URL is one HTTP can reach:
    found by ``roster check`` and on reload, not by the first turn (which
    would retry a URL without a scheme as if the network had failed)."""
    if config.kind != "echo" and not config.model:
        raise ConfigError(
            f"{path}: `{where}.model`: an {config.kind} engine needs a model",
            path=str(path),
            key=f"{where}.model",
        )
    if config.base_url and not config.base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"{path}: `{where}.base_url`: {config.base_url!r} is not an http:// or https:// URL",
            path=str(path),
            key=f"{where}.base_url",
        )


def _check_named(
    path: Path,
    key: str,
    names: Sequence[str],
    table: Mapping[str, object],
    table_name: str | None = None,
) -> None:
    table_name = table_name or key.rpartition(".")[2]
    for name in names:
        if name not in table:
            raise ConfigError(
                f"{path}: {key} names {name!r}, expected one of [{table_name}.*]: {sorted(table)}",
                path=str(path),
                key=key,
            )


def _read_text(
    root: Path, path: Path, stamps: dict[str, Stamp | None], *, required: bool
) -> str | None:
    # Stamped first: an edit from here on is a change from this stamp.
    stamps[str(path)] = stamp(path)
    try:
        resolved = path.resolve(strict=True)
    except FileNotFoundError:
        if required:
            raise ConfigError(f"{path}: file is missing", path=str(path)) from None
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot resolve: {exc.strerror}", path=str(path)) from None
    if not resolved.is_relative_to(root):
        raise ConfigError(
            f"{path}: resolves to {resolved}, outside the org directory {root}", path=str(path)
        )
    try:
        data = _read_regular(resolved)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}", path=str(path)) from None
    if data is None:
        raise ConfigError(f"{path}: not a regular file", path=str(path))
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(
            f"{path}: over {MAX_FILE_BYTES} bytes, the largest file an org may hold",
            path=str(path),
        )
    try:
        # A leading byte order mark marks the encoding, as some editors
        # save UTF-8: it is no part of the text a worker sees.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})", path=str(path)) from None
    # Line ends as a file opened as text reads them: "\r\n" and "\r" are "\n".
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _read_regular(path: Path) -> bytes | None:
    """Up to one byte past ``MAX_FILE_BYTES`` of *path*, or ``None`` when it
    is not a regular file. A FIFO is opened without waiting for a writer, and
    a symlink put in the resolved path's place since is not followed."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        left = MAX_FILE_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
