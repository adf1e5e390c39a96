"""Running a parsed command line. Exit codes: 0 ok, 1 failure, 2 usage.

Errors go to stderr as one line; a user mistake (unknown run, daemon down,
bad org) never shows a traceback. The client commands need only the
protocol and the client; a command that needs more (the daemon, the
compiler over an org, the run store) imports it when it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import anyio
import msgspec

from .._errors import InvalidIdError, RosterError, RpcError
from ..protocol import INVALID_PARAMS, StateLocation, default_socket_path, state_location
from ._calls import COMMANDS
from ._chat import chat, describe_rpc_error
from ._output import UsageError


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _socket(args: argparse.Namespace) -> Path:
    if args.socket:
        return Path(args.socket)
    if (env := _env_path("ROSTER_SOCKET")) is not None:
        return env
    state = state_location(os.environ.get("ROSTER_STATE") or ".state")
    return default_socket_path(state, os.environ)


def _state(args: argparse.Namespace) -> StateLocation:
    state: str | None = args.state or os.environ.get("ROSTER_STATE")
    if not state:
        raise UsageError("no state: pass --state DIR|URL or set ROSTER_STATE")
    return state_location(state)


def _org(args: argparse.Namespace) -> Path:
    org = Path(args.org) if args.org else _env_path("ROSTER_ORG")
    if org is None:
        raise UsageError("no org directory: pass --org DIR or set ROSTER_ORG")
    return org


def run(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except UsageError as exc:
        print(f"roster: {exc}", file=sys.stderr)
        return 2
    except RpcError as exc:
        print(f"roster: {describe_rpc_error(exc)}", file=sys.stderr)
        return 2 if exc.code == INVALID_PARAMS else 1
    except InvalidIdError as exc:
        print(f"roster: {exc}", file=sys.stderr)
        return 2
    except RosterError as exc:
        print(f"roster: {exc}", file=sys.stderr)
        return 1
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        # Only a state file edited or damaged by hand gets here.
        print(f"roster: unreadable state file: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader (``| head``) left; not an error of ours.
        # As the Python docs advise, so the exit-time flush does not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        print(f"roster: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 1


def _dispatch(args: argparse.Namespace) -> int:
    handler: str = args.handler
    if handler in COMMANDS:
        return anyio.run(COMMANDS[handler], args, _socket(args))
    match handler:
        case "serve":
            return _serve(args)
        case "chat":
            return anyio.run(chat, _socket(args), args.worker, args.channel, args.sender, args.wait)
        case "check":
            return _check(args)
        case "inspect":
            return _inspect(args)
        case "bridge irc":
            return _bridge_irc(args)
        case (
            "runs list"
            | "runs show"
            | "runs context"
            | "runs export"
            | "stats cache"
            | "stats cost"
        ):
            return _server(args)
    raise AssertionError(f"no handler for {handler!r}")


def _serve(args: argparse.Namespace) -> int:
    if not args.org or not args.state:
        raise UsageError("serve needs --org and --state (or ROSTER_ORG and ROSTER_STATE)")
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # The daemon (engines, httpx, watchfiles) loads for this command only.
    from ..daemon import run_daemon

    socket_path = Path(args.socket) if args.socket else _env_path("ROSTER_SOCKET")
    state: StateLocation = state_location(args.state)
    anyio.run(
        partial(run_daemon, metrics_listen=args.metrics),
        Path(args.org),
        state,
        socket_path,
        os.environ,
    )
    return 0


def _bridge_irc(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        # The irc library loads for this command only.
        from ..bridge import BridgeConfig, IrcBridge, Rate
    except ImportError as exc:
        raise UsageError(
            f"the IRC bridge needs the irc extra ({exc.name} is missing): "
            "pip install 'rosterd[irc]'"
        ) from None
    host, _, port = args.server.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--server {args.server!r}: expected HOST:PORT")
    channels = {}
    for pair in args.map:
        irc_channel, _, channel = pair.partition("=")
        if not irc_channel.startswith(("#", "&")) or not channel:
            raise UsageError(f"--map {pair!r}: expected '#irc-channel=rosterd-channel'")
        channels[irc_channel] = channel
    config = BridgeConfig(
        socket=_socket(args),
        host=host,
        port=int(port),
        nick=args.nick,
        worker=args.worker,
        channels=channels,
        reply={c.lower(): "all" for c in args.reply_all},
        tls=args.tls,
        debounce_s=args.debounce,
        max_lines=args.max_lines,
        send_rate=Rate(args.line_burst, args.line_interval),
        private_rate=Rate(args.private_burst, args.private_interval),
        mention_rate=Rate(args.mention_burst, args.mention_interval),
        operators=tuple(args.operator),
    )
    anyio.run(IrcBridge(config).run)
    return 0


def _warnings_to_stderr() -> None:
    """What a reading command could not read (a run whose info was edited
    by hand), said on stderr beside what it printed."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)


def _inspect(args: argparse.Namespace) -> int:
    _warnings_to_stderr()
    try:
        # Starlette, uvicorn and Jinja2 load for this command only.
        from ..inspect import serve_inspector
    except ImportError as exc:
        raise UsageError(
            f"the inspector needs the inspect extra ({exc.name} is missing): "
            "pip install 'rosterd[inspect]'"
        ) from None
    from ..org import read_token
    from ..stores import read_state_runs

    token = None
    if args.token_file:
        try:
            token = read_token(Path(args.token_file))
        except ValueError as why:
            raise UsageError(f"--token-file {args.token_file}: {why}") from None

    anyio.run(serve_inspector, partial(read_state_runs, _state(args)), args.listen, token)
    return 0


def _check(args: argparse.Namespace) -> int:
    # The org loader and the whole compiler, for this command only.
    from ._check import check

    return check(_org(args), args.json)


def _server(args: argparse.Namespace) -> int:
    # The run store (sessions, aiofiles), for the commands that read the state directly.
    from ._runs import runs_context, runs_export, runs_list, runs_show
    from ._stats import stats_cache, stats_cost

    _warnings_to_stderr()
    state = _state(args)
    match args.handler:
        case "runs list":
            return anyio.run(runs_list, state, args.json, args.limit)
        case "runs show":
            return anyio.run(runs_show, state, args.run, args.json)
        case "runs context":
            return anyio.run(runs_context, state, args.run, args.all, args.json)
        case "runs export":
            return anyio.run(runs_export, state, args.run)
        case "stats cost":
            since = _since(args.since)
            return anyio.run(
                stats_cost, state, args.worker, args.channel, since, args.by, args.json
            )
    return anyio.run(stats_cache, state, args.worker, args.channel, args.json)


def _since(text: str | None) -> float | None:
    """``--since`` as seconds since the epoch; a time without a zone is UTC."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r} is not an ISO time, e.g. 2026-12-01T00:00") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
