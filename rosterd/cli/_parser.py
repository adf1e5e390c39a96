"""The argument parser of ``roster``: every command, option and help text.

Each leaf command sets ``handler``, the name ``_main`` dispatches on. A
usage mistake is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from typing import Any, NoReturn, TypeAlias

from .. import __version__
from .._bridge_defaults import DEBOUNCE_S, MAX_LINES, MENTION_RATE, PRIVATE_RATE, SEND_RATE

_CONTEXT_FORMAT = """\
output format (without --json): for each turn, the system text and then every
message, each as a header line, exactly the stated number of UTF-8 bytes of
content, and one newline that is not part of the content:

  === turn 2 system (4123 bytes) ===
  <4123 bytes>
  === turn 2 message 1/3 user (345 bytes) ===
  <345 bytes>
  ...
  === end of turn 2 ===

with --json: a list of {"turn", "system", "messages": [{"role", "content"}]}.
"""

_CHECK_EPILOG = """\
every worker is compiled for each channel it belongs to (session and task
surfaces) and for a direct run, with empty memory and a short placeholder
message. exit status 1, with one line per problem on stderr, when the org
cannot be loaded (bad TOML, unknown key, missing file) or a mandatory block
is over its budget.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("roster").strip()
        prefix = f"roster: {where}: " if where else "roster: "
        self.exit(2, f"{prefix}{message} (see '{self.prog} --help')\n")


class _Version(argparse.Action):
    """The installed distribution's version, looked up only when asked for."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        # Not at the top: importlib.metadata costs every other command a sixth of its start.
        import importlib.metadata

        try:
            installed = importlib.metadata.version("rosterd")
        except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
            installed = f"{__version__} (not installed)"
        print(f"roster {installed}")
        parser.exit()


# What add_subparsers returns: the command groups each helper adds to.
# Subscripted for type checkers only: argparse's class is not generic at run time.
_Subparsers: TypeAlias = "argparse._SubParsersAction[_Parser]"


def _client_options() -> _Parser:
    options = _Parser(add_help=False)
    options.add_argument(
        "--socket",
        metavar="PATH",
        help="daemon socket (default: $ROSTER_SOCKET, else $RUNTIME_DIRECTORY/rosterd.sock, "
        "else $ROSTER_STATE/rosterd.sock)",
    )
    options.add_argument("--json", action="store_true", help="print the reply as JSON")
    return options


def _state_options() -> _Parser:
    options = _Parser(add_help=False)
    options.add_argument(
        "--state",
        metavar="DIR|URL",
        help="state directory or postgresql:// URL (default: $ROSTER_STATE)",
    )
    options.add_argument("--json", action="store_true", help="print JSON for scripts")
    return options


# The longest wait or interval an option takes, a day: past it, a number
# is a mistake (milliseconds written as seconds), and ``inf`` meant as
# "never" is better said by leaving the option out.
_MAX_SECONDS = 86400.0
# The most lines an option counts: a burst or a reply past it is a typo.
_MAX_COUNT = 1000


def _seconds(text: str) -> float:
    """An option's seconds: a finite number from 0 to a day."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= _MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds from 0 to {_MAX_SECONDS:g}"
        )
    return value


def _count(text: str) -> int:
    """An option's count of lines: a whole number from 1 to 1000."""
    if not text.strip().isdigit() or not 1 <= int(text) <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {_MAX_COUNT}")
    return int(text)


def _page_size(text: str) -> int:
    """``--limit``: how many of a list's newest items (the daemon bounds a page)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _newest(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--limit", type=_page_size, metavar="N", help=f"only the newest N {what} (default: all)"
    )


def _text(parser: argparse.ArgumentParser, name: str, what: str) -> None:
    parser.add_argument(name, nargs="+", help=f"{what}; several words are joined, '-' reads stdin")


def _sender(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="sender",
        default=os.environ.get("USER") or "operator",
        metavar="NAME",
        help="who is speaking (default: $USER)",
    )


def _actions(commands: _Subparsers, name: str, **options: Any) -> _Subparsers:
    """A command made of commands, each an ACTION; *options* go to ``add_parser``."""
    return commands.add_parser(name, **options).add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )


def _command(group: _Subparsers, name: str, **options: Any) -> _Parser:
    """A leaf command; *options* go to ``add_parser``. Its ``handler``, the
    name ``_main`` dispatches on, is its words after ``roster`` (and after
    ``server``, which only gathers the commands that read the state). An
    epilog is laid out by hand (a format, a list of checks): printed as
    written, not rewrapped."""
    if "epilog" in options:
        options["formatter_class"] = argparse.RawDescriptionHelpFormatter
    command = group.add_parser(name, **options)
    command.set_defaults(handler=command.prog.removeprefix("roster ").removeprefix("server "))
    return command


def _run_command(runs: _Subparsers, name: str, state: _Parser, **options: Any) -> _Parser:
    """A ``runs`` command about one run, given as RUN."""
    command = _command(runs, name, parents=[state], **options)
    command.add_argument("run", metavar="RUN", help="the run id (see 'runs list')")
    return command


def _run_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--worker", help="only runs of this worker")
    parser.add_argument("--channel", help="only runs in this channel")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="roster",
        description="Run and talk to rosterd, the host daemon of Roster. "
        "Exit status: 0 ok, 1 failure, 2 usage.",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the installed version and exit"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    client = _client_options()
    state = _state_options()

    _serve_commands(commands)
    _talk_commands(commands, client)
    _task_commands(commands, client)
    _note_commands(commands, client)
    _check_commands(commands)
    _bridge_commands(commands, client)
    areas = _server_commands(commands, state)
    _aggregate_commands(areas, state)
    return parser


def _serve_commands(commands: _Subparsers) -> None:
    """``serve``: the daemon itself."""
    serve = _command(commands, "serve", help="run the daemon in the foreground")
    serve.add_argument("--org", default=os.environ.get("ROSTER_ORG"), help="org dir ($ROSTER_ORG)")
    serve.add_argument(
        "--state",
        metavar="DIR|URL",
        default=os.environ.get("ROSTER_STATE"),
        help="state directory, or a postgresql:// URL several daemons share ($ROSTER_STATE)",
    )
    serve.add_argument("--socket", default=None, help="socket path ($ROSTER_SOCKET)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        default=None,
        help="serve Prometheus metrics at /metrics here (overrides [metrics] listen)",
    )


def _talk_commands(commands: _Subparsers, client: _Parser) -> None:
    """``chat`` and ``run``: talking to a worker."""
    chat = _command(
        commands,
        "chat",
        help="chat with a worker in a channel",
        description="Open (or resume) the warm session of a worker in a channel and chat; "
        "replies stream to stdout, the run id and a compile summary per turn go to stderr.",
    )
    chat.add_argument("--worker", required=True, help="the worker to talk to")
    chat.add_argument("--channel", required=True, help="the channel the session belongs to")
    _sender(chat)
    chat.add_argument("--socket", default=None, metavar="PATH", help="socket ($ROSTER_SOCKET)")
    chat.add_argument(
        "--wait",
        type=_seconds,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for the daemon",
    )

    run = _command(
        commands,
        "run",
        parents=[client],
        help="an ad-hoc run of a worker, outside any channel",
        description="A direct run: one compilation, one engine call; the reply streams.",
    )
    run.add_argument("--worker", required=True, help="the worker to run")
    _sender(run)
    _text(run, "text", "the message")


def _task_commands(commands: _Subparsers, client: _Parser) -> None:
    """``task``: queued tasks."""
    task = _actions(commands, "task", help="queue tasks and follow them")
    submit = _command(task, "submit", parents=[client], help="queue a task for a worker")
    submit.add_argument("--worker", required=True, help="the worker to run the task")
    submit.add_argument("--channel", required=True, help="the channel the task is for")
    _text(submit, "text", "the task")
    get = _command(task, "get", parents=[client], help="show one task: status, runs, reply")
    get.add_argument("task", metavar="ID", help="the task id")
    get.add_argument(
        "--wait",
        type=_seconds,
        metavar="SECONDS",
        help="answer once the task is done, failed or paused, waiting at most this long",
    )
    _newest(_command(task, "list", parents=[client], help="list every task"), "tasks")


def _note_commands(commands: _Subparsers, client: _Parser) -> None:
    """``memory``, ``gate`` and ``channel``: what workers read."""
    memory = _actions(commands, "memory", help="a worker's advisory notes")
    add = _command(
        memory, "add", parents=[client], help="add a note, eligible from the next compilation on"
    )
    add.add_argument("--worker", required=True, help="whose memory")
    add.add_argument("--channel", help="only for this channel (default: every channel)")
    _text(add, "text", "the note")
    listing = _command(
        memory, "list", parents=[client], help="list a worker's notes: scope, author, text"
    )
    listing.add_argument("--worker", required=True, help="whose memory")
    listing.add_argument(
        "--all", action="store_true", help="the retired notes too: who retired them and why"
    )
    _newest(listing, "notes")
    forget = _command(
        memory, "forget", parents=[client], help="retire a note: it never ranks again"
    )
    forget.add_argument("note", metavar="ID", help="the note id, e.g. m-12")
    forget.add_argument("--worker", required=True, help="whose memory")
    forget.add_argument("--because", required=True, help="why it is retired (recorded)")

    gate = _actions(commands, "gate", help="questions a worker waits on")
    file = _command(gate, "file", parents=[client], help="file a gate; it shows in briefings")
    file.add_argument("--worker", required=True, help="the worker waiting")
    file.add_argument("--channel", help="the channel it concerns (default: every channel)")
    file.add_argument("--run", help="the run that waits on it (a task pauses until resolved)")
    _text(file, "summary", "what is being asked")
    resolve = _command(gate, "resolve", parents=[client], help="resolve a gate with an outcome")
    resolve.add_argument("gate", metavar="ID", help="the gate id")
    resolve.add_argument("--outcome", required=True, help="the decision")
    resolve.add_argument("--note", default="", help="an optional note for the worker")
    gates = _command(gate, "list", parents=[client], help="list gates")
    gates.add_argument("--worker", help="only this worker's gates")
    _newest(gates, "gates")

    channel = _actions(commands, "channel", help="channel logs")
    post = _command(
        channel, "post", parents=[client], help="post to a channel's log (history for new sessions)"
    )
    post.add_argument("--channel", required=True, help="the channel")
    post.add_argument("--from", dest="sender", required=True, metavar="NAME", help="the sender")
    _text(post, "text", "the message")

    _command(
        commands, "status", parents=[client], help="the daemon's version, load and config state"
    )


def _check_commands(commands: _Subparsers) -> None:
    """``check``: an org before it is deployed."""
    check = _command(
        commands,
        "check",
        help="validate an org and dry-run every compilation (a pre-deploy gate)",
        description="Validate an org directory and dry-run the compiler for every worker x "
        "channel x surface, printing each block's size against its limit.",
        epilog=_CHECK_EPILOG,
    )
    check.add_argument("--org", metavar="DIR", help="org directory (default: $ROSTER_ORG)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")


def _bridge_commands(commands: _Subparsers, client: _Parser) -> None:
    """``bridge``: chat networks as frontends."""
    bridge = commands.add_parser(
        "bridge", help="connect a chat network to the daemon"
    ).add_subparsers(dest="network", required=True, metavar="NETWORK")
    irc = _command(
        bridge,
        "irc",
        parents=[client],
        help="a worker in IRC channels (rosterd[irc])",
        description="Join IRC channels as a worker: every line is posted to the mapped "
        "rosterd channel, and the worker answers when addressed (NICK: …, @NICK, or a "
        "private message). See docs/frontend.md.",
    )
    irc.add_argument("--server", required=True, metavar="HOST:PORT", help="the IRC server")
    irc.add_argument("--tls", action="store_true", help="connect with TLS")
    irc.add_argument("--nick", required=True, help="the worker's nick")
    irc.add_argument("--worker", required=True, help="the worker that answers")
    irc.add_argument(
        "--map",
        action="append",
        required=True,
        metavar="#IRC=CHANNEL",
        help="an IRC channel and the rosterd channel it is (repeat for more)",
    )
    irc.add_argument(
        "--reply-all",
        action="append",
        default=[],
        metavar="#IRC",
        help="answer every line in this IRC channel, not only those addressed",
    )
    irc.add_argument(
        "--operator",
        action="append",
        default=[],
        metavar="MASK",
        help="nick!user@host glob that may !approve and !reject gates (repeat for more)",
    )
    irc.add_argument(
        "--debounce", type=_seconds, default=DEBOUNCE_S, metavar="S", help="default: %(default)g"
    )
    irc.add_argument(
        "--max-lines", type=_count, default=MAX_LINES, metavar="N", help="default: %(default)s"
    )
    rates = (
        ("line", SEND_RATE, "lines sent at once"),
        ("private", PRIVATE_RATE, "private messages one host may send at once"),
        ("mention", MENTION_RATE, "turns one host may ask for in channels at once"),
    )
    for name, rate, burst in rates:
        irc.add_argument(
            f"--{name}-burst",
            type=_count,
            default=rate.burst,
            metavar="N",
            help=f"{burst}; default: %(default)s",
        )
        irc.add_argument(
            f"--{name}-interval",
            type=_seconds,
            default=rate.interval_s,
            metavar="S",
            help="then one per S seconds; default: %(default)g",
        )


def _server_commands(commands: _Subparsers, state: _Parser) -> _Subparsers:
    """``server runs``: the state, read directly; the areas, for more."""
    server = commands.add_parser("server", help="inspect the daemon's state directory")
    areas = server.add_subparsers(dest="area", required=True, metavar="AREA")
    runs = _actions(
        areas,
        "runs",
        help="runs and their traces: what did the worker see?",
        description="Read runs from the state directory; works while the daemon is down.",
    )
    _newest(_command(runs, "list", parents=[state], help="list every run"), "runs")
    _run_command(
        runs, "show", state, help="blocks, budget arithmetic, cache boundaries and usage of a run"
    )
    context = _run_command(
        runs,
        "context",
        state,
        help="the exact prompts the engine received",
        description="Print the exact compiled prompts of a run, byte for byte what the "
        "engine received: the latest turn, or every turn with --all.",
        epilog=_CONTEXT_FORMAT,
    )
    context.add_argument("--all", action="store_true", help="every turn, not only the latest")
    _run_command(
        runs,
        "export",
        state,
        help="a run's trace as context.jsonl, byte for byte, from either backend",
    )
    return areas


def _aggregate_commands(areas: _Subparsers, state: _Parser) -> None:
    """``server inspect`` and ``server stats``."""
    inspect = _command(
        areas,
        "inspect",
        parents=[state],
        help="a read-only web page of the runs: what did the worker see? (rosterd[inspect])",
        description="Serve the trace inspector over the state directory or database; works "
        "while the daemon is down. Loopback only, unless --token-file gives a token.",
    )
    inspect.add_argument(
        "--listen", default="127.0.0.1:8377", metavar="HOST:PORT", help="default: %(default)s"
    )
    inspect.add_argument(
        "--token-file",
        metavar="PATH",
        help="a file holding the token every request must carry (needed off loopback)",
    )

    stats = _actions(
        areas,
        "stats",
        help="aggregates over every run",
        description="Aggregates over the state directory.",
    )
    cache = _command(
        stats,
        "cache",
        parents=[state],
        help="cache-read share and cache misses by cause",
        description="Cache-read share of input tokens, per-turn verdicts and misses by cause, "
        "from the usage each provider reported.",
    )
    _run_filters(cache)
    cost = _command(
        stats,
        "cost",
        parents=[state],
        help="what the engine calls cost, in USD",
        description="The billed cost of every engine call, summed from what each recorded: "
        "its usage and the price row it was billed at. A call without a price counts as "
        "unpriced, never as 0.",
    )
    _run_filters(cost)
    cost.add_argument("--since", metavar="ISO", help="only calls since this time (UTC if no zone)")
    cost.add_argument(
        "--by", choices=["day", "worker", "channel", "model"], help="one row per day, worker, …"
    )
