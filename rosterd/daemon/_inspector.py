"""The trace inspector ``[inspect] listen`` asks the daemon to serve, in a
child process (``python -m rosterd.inspect``).

A page of a long run takes tens of milliseconds of decoding and rendering.
On the daemon's event loop every session's turns would wait that long; in a
thread they would still wait, since the page holds the interpreter's lock.
In a process of its own a page takes another core, and no turn waits on it.

The child reads the state as ``roster server inspect`` does (the state
directory, or its own connection to the database). It is kept as
``rosterd._child`` keeps the daemon's children. Its log lines are the
daemon's, and a child that cannot start fails the daemon's start with its
reason; one that ends later is started again.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Collection
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from .._child import lines, log_exit, missing_module, run_again, spawn, stop
from .._errors import RosterError
from ..org import InspectConfig, read_token
from ..protocol import StateLocation

log = logging.getLogger("rosterd.inspect")
_NAME = "inspector"
# The line the child logs once it listens: ``inspector on http://HOST:PORT/``.
_READY = "inspector on "
# How long a stopping child may finish the page under way.
_STOP_S = 5


def _command(config: InspectConfig, root: Path) -> tuple[list[str], dict[str, str]]:
    """The child's command, and its environment but for the state, which
    the caller adds. Raises ``RosterError`` when the inspector cannot start:
    the extra is missing, or the token cannot be read."""
    assert config.listen is not None
    missing = missing_module(("starlette", "uvicorn", "jinja2"))
    if missing is not None:
        raise RosterError(
            f"[inspect] listen needs the inspect extra ({missing} is missing): "
            "pip install 'rosterd[inspect]'"
        )
    environ = dict(os.environ)
    environ.pop("ROSTER_INSPECT_TOKEN", None)
    if config.token_file is not None:
        path = root / config.token_file
        try:
            environ["ROSTER_INSPECT_TOKEN"] = read_token(path)
        except ValueError as why:
            raise RosterError(f"[inspect] token_file {path}: {why}") from None
    return [sys.executable, "-m", "rosterd.inspect", config.listen], environ


async def serve_inspector_apart(
    config: InspectConfig,
    root: Path,
    state: StateLocation,
    withheld: Collection[str] = (),
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The inspector *config* asks for, over *state*, in a child process
    without the environment variables *withheld*, until cancelled; started
    once it listens. Raises ``RosterError`` with the child's reason if the
    first child ends before that. A child that ends later is logged and
    started again (``rosterd._child.run_again``)."""
    command, environ = _command(config, root)
    environ["ROSTER_STATE"] = str(state)
    await _run_child(command, environ, withheld, task_status.started)
    await run_again(
        _NAME, log, lambda: _run_child(command, environ, withheld, lambda: None, again=True)
    )


async def _run_child(
    command: list[str],
    environ: dict[str, str],
    withheld: Collection[str],
    ready: Callable[[], None],
    *,
    again: bool = False,
) -> None:
    """One child, until it exits: *ready* is called once it listens (its
    line logged, saying *again* if it is not the first). Raises
    ``RosterError`` with its last line if it exits before that."""
    child = await spawn(command, environ, stdout=False, withheld=withheld)
    try:
        assert child.stderr is not None
        child_lines = lines(child.stderr)
        last = ""
        async for line in child_lines:
            if last:
                log.warning("%s", last)
            if line.startswith(_READY):
                log.warning("%s%s", line, " (started again)" if again else "")
                ready()
                break
            last = line
        else:
            code = await child.wait()
            raise RosterError(last or f"the inspector exited with status {code} as it started")
        async for line in child_lines:
            log.warning("%s", line)
        log_exit(_NAME, log, await child.wait())
    finally:
        with anyio.CancelScope(shield=True):
            await stop(child, _NAME, log, _STOP_S)
