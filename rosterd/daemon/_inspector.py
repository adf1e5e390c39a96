"""The trace inspector ``[inspect] listen`` asks the daemon to serve, in a
child process (``python -m rosterd.inspect``).

A page of a long run takes tens of milliseconds of decoding and rendering.
On the daemon's event loop every session's turns would wait that long; in a
thread they would still wait, since the page holds the interpreter's lock.
In a process of its own a page takes another core, and no turn waits on it.

The child reads the state as ``roster server inspect`` does (the state
directory, or its own connection to the database). It stops when the
daemon closes its standard input, or dies. Its log lines are the daemon's,
and a child that cannot start fails the daemon's start with its reason; one
that ends later is started again.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, Process, TaskStatus

from .._errors import RosterError
from ..org import InspectConfig, read_token
from ..protocol import StateLocation

log = logging.getLogger("rosterd.inspect")
# The line the child logs once it listens: ``inspector on http://HOST:PORT/``.
_READY = "inspector on "
# Longer lines are not the child's own: cut, not waited for.
_LINE_BYTES = 64 * 1024
# How long a stopping child may finish the page under way.
_STOP_S = 5
# A child that ended is started again after this long, twice as long after
# each that did not last _STEADY_S, and never more than _RESTART_MAX_S.
_RESTART_S = 1.0
_STEADY_S = 60.0
_RESTART_MAX_S = 60.0


def _command(config: InspectConfig, root: Path) -> tuple[list[str], dict[str, str]]:
    """The child's command, and its environment but for the state, which
    the caller adds. Raises ``RosterError`` when the inspector cannot start:
    the extra is missing, or the token cannot be read."""
    assert config.listen is not None
    # Checked here so that the daemon never loads Starlette, uvicorn or Jinja2.
    for module in ("starlette", "uvicorn", "jinja2"):
        if importlib.util.find_spec(module) is None:
            raise RosterError(
                f"[inspect] listen needs the inspect extra ({module} is missing): "
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
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The inspector *config* asks for, over *state*, in a child process,
    until cancelled; started once it listens. Raises ``RosterError`` with
    the child's reason if the first child ends before that. A child that
    ends later is logged and started again, as systemd would a service:
    after ``_RESTART_S``, twice as long after each child that did not last
    ``_STEADY_S``, at most ``_RESTART_MAX_S``."""
    command, environ = _command(config, root)
    environ["ROSTER_STATE"] = str(state)
    await _run_child(command, environ, task_status.started)
    delay = _RESTART_S
    while True:
        log.warning("the inspector starts again in %g s", delay)
        await anyio.sleep(delay)
        began = time.monotonic()
        try:
            await _run_child(command, environ, lambda: None, again=True)
        except RosterError as exc:
            log.error("the inspector did not start again: %s", exc)
        steady = time.monotonic() - began >= _STEADY_S
        delay = _RESTART_S if steady else min(2 * delay, _RESTART_MAX_S)


async def _run_child(
    command: list[str], environ: dict[str, str], ready: Callable[[], None], *, again: bool = False
) -> None:
    """One child, until it exits: *ready* is called once it listens (its
    line logged, saying *again* if it is not the first). Raises
    ``RosterError`` with its last line if it exits before that."""
    # A session of its own: a terminal's Ctrl-C reaches the daemon, which
    # drains, then stops the child; the child never stops first.
    child = await anyio.open_process(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=environ,
        start_new_session=True,
    )
    try:
        assert child.stderr is not None
        lines = _lines(child.stderr)
        last = ""
        async for line in lines:
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
        async for line in lines:
            log.warning("%s", line)
        code = await child.wait()
        if code < 0:
            # Under systemd a stop signals the whole unit, the child too.
            log.warning("the inspector was stopped by %s", signal.Signals(-code).name)
        else:
            log.error("the inspector exited with status %d", code)
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(child)


async def _stop(child: Process) -> None:
    """Close *child*'s standard input, which stops it; kill it if it has not
    stopped within ``_STOP_S`` (a page under way gets a moment to finish)."""
    assert child.stdin is not None
    await child.stdin.aclose()
    with anyio.move_on_after(_STOP_S) as waiting:
        await child.wait()
    if waiting.cancelled_caught:
        log.warning("the inspector did not stop within %d s: killed", _STOP_S)
        child.kill()
    await child.aclose()


async def _lines(stream: ByteReceiveStream) -> AsyncIterator[str]:
    """*stream*'s lines, without their ends, until it ends; a line longer
    than ``_LINE_BYTES`` keeps its last ones."""
    pending = b""
    async for chunk in stream:
        *whole, pending = (pending + chunk).split(b"\n")
        for line in whole:
            yield line[-_LINE_BYTES:].decode(errors="replace")
        pending = pending[-_LINE_BYTES:]
    if pending:
        yield pending.decode(errors="replace")
