"""``roster``: the command line. Exit codes: 0 ok, 1 failure, 2 usage.

Errors go to stderr as one line; a user mistake (unknown run, daemon down,
bad org) never shows a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import msgspec

from .._errors import InvalidIdError, RosterError
from ..client import RpcError
from ..daemon import default_socket_path, run_daemon
from ._calls import COMMANDS
from ._chat import chat, describe_rpc_error
from ._check import check
from ._output import UsageError
from ._parser import build_parser
from ._runs import runs_context, runs_list, runs_show
from ._stats import stats_cache

__all__ = ("main",)

_INVALID_PARAMS = -32602


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _socket(args: argparse.Namespace) -> Path:
    if args.socket:
        return Path(args.socket)
    if (env := _env_path("ROSTER_SOCKET")) is not None:
        return env
    state = _env_path("ROSTER_STATE") or Path(".state")
    return default_socket_path(state, os.environ)


def _state(args: argparse.Namespace) -> Path:
    state = Path(args.state) if args.state else _env_path("ROSTER_STATE")
    if state is None:
        raise UsageError("no state directory: pass --state DIR or set ROSTER_STATE")
    return state


def _org(args: argparse.Namespace) -> Path:
    org = Path(args.org) if args.org else _env_path("ROSTER_ORG")
    if org is None:
        raise UsageError("no org directory: pass --org DIR or set ROSTER_ORG")
    return org


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return _dispatch(args)
    except UsageError as exc:
        print(f"roster: {exc}", file=sys.stderr)
        return 2
    except RpcError as exc:
        print(f"roster: {describe_rpc_error(exc)}", file=sys.stderr)
        return 2 if exc.code == _INVALID_PARAMS else 1
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
            return check(_org(args), args.json)
        case "runs list":
            return anyio.run(runs_list, _state(args), args.json)
        case "runs show":
            return anyio.run(runs_show, _state(args), args.run, args.json)
        case "runs context":
            return anyio.run(runs_context, _state(args), args.run, args.all, args.json)
        case "stats cache":
            return anyio.run(stats_cache, _state(args), args.worker, args.channel, args.json)
    raise AssertionError(f"no handler for {handler!r}")


def _serve(args: argparse.Namespace) -> int:
    if not args.org or not args.state:
        raise UsageError("serve needs --org and --state (or ROSTER_ORG and ROSTER_STATE)")
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    socket_path = Path(args.socket) if args.socket else _env_path("ROSTER_SOCKET")
    anyio.run(run_daemon, Path(args.org), Path(args.state), socket_path, os.environ)
    return 0
