"""``roster``: the command line. Exit codes: 0 ok, 1 failure, 2 usage.

Errors go to stderr as one line; a user mistake never shows a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from .._errors import RosterError
from ..daemon import default_socket_path, run_daemon
from ._chat import chat

__all__ = ("main",)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _socket(args: argparse.Namespace) -> Path:
    if args.socket is not None:
        return Path(args.socket)
    if (env := _env_path("ROSTER_SOCKET")) is not None:
        return env
    state = _env_path("ROSTER_STATE") or Path(".state")
    return default_socket_path(state, os.environ)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roster", description="Run and talk to rosterd, the host daemon of Roster."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the daemon in the foreground")
    serve.add_argument(
        "--org", default=os.environ.get("ROSTER_ORG"), help="org directory ($ROSTER_ORG)"
    )
    serve.add_argument(
        "--state", default=os.environ.get("ROSTER_STATE"), help="state directory ($ROSTER_STATE)"
    )
    serve.add_argument("--socket", default=None, help="socket path ($ROSTER_SOCKET)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    chat_cmd = commands.add_parser("chat", help="chat with a worker in a channel")
    chat_cmd.add_argument("--worker", required=True)
    chat_cmd.add_argument("--channel", required=True)
    chat_cmd.add_argument("--from", dest="sender", default=os.environ.get("USER") or "operator")
    chat_cmd.add_argument("--socket", default=None, help="socket path ($ROSTER_SOCKET)")
    chat_cmd.add_argument(
        "--wait", type=float, default=0.0, metavar="S", help="wait up to S seconds for the daemon"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        match args.command:
            case "serve":
                return _serve(parser, args)
            case "chat":
                return anyio.run(
                    chat, _socket(args), args.worker, args.channel, args.sender, args.wait
                )
    except RosterError as exc:
        print(f"roster: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 1
    parser.error(f"unknown command {args.command!r}")


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if not args.org or not args.state:
        parser.error("serve needs --org and --state (or ROSTER_ORG and ROSTER_STATE)")
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    socket_path = Path(args.socket) if args.socket else _env_path("ROSTER_SOCKET")
    anyio.run(run_daemon, Path(args.org), Path(args.state), socket_path, os.environ)
    return 0
