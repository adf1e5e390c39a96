"""Child processes the daemon keeps for work that must not share its
interpreter: the trace inspector and the span exporter.

Each runs in a session of its own, so that a terminal's Ctrl-C reaches only
the daemon, which stops the child once it has drained; each stops when its
standard input closes, which it also does when the daemon dies. A child
that ends while the daemon serves is started again, as systemd would a
service: after ``RESTART_S``, twice as long after each child that did not
last ``STEADY_S``, never more than ``RESTART_MAX_S``.
"""

from __future__ import annotations

import importlib.util
import logging
import signal
import subprocess
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)

import anyio
from anyio.abc import ByteReceiveStream, Process

from ._errors import RosterError

# Longer lines are not the child's own: cut, not waited for.
LINE_BYTES = 64 * 1024
RESTART_S = 1.0
STEADY_S = 60.0
RESTART_MAX_S = 60.0


def missing_module(modules: Iterable[str]) -> str | None:
    """The first of *modules* (what a child imports) that is not installed,
    found without importing any: the daemon never loads a child's imports."""
    for module in modules:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except ModuleNotFoundError:  # a package above it is missing
            return module
    return None


async def spawn(
    command: Sequence[str],
    environ: Mapping[str, str],
    *,
    stdout: bool,
    withheld: Collection[str] = (),
) -> Process:
    """*command* as a child in a session of its own, its standard input a
    pipe (closing it stops the child), and its standard output one if
    *stdout*. Its environment is *environ* but *withheld* (the secrets the
    org names: no child needs a provider's key) and ``NOTIFY_SOCKET`` (only
    the daemon speaks to systemd)."""
    left_out = {"NOTIFY_SOCKET", *withheld}
    return await anyio.open_process(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
        env={name: value for name, value in environ.items() if name not in left_out},
        start_new_session=True,
    )


async def run_again(name: str, log: logging.Logger, run: Callable[[], Awaitable[None]]) -> None:
    """Start *run* (one child, until it ends) again each time it ends,
    until cancelled; *name* says which child in the log."""
    delay = RESTART_S
    while True:
        log.warning("the %s starts again in %g s", name, delay)
        await anyio.sleep(delay)
        began = time.monotonic()
        try:
            await run()
        except RosterError as exc:
            log.error("the %s did not start again: %s", name, exc)
        steady = time.monotonic() - began >= STEADY_S
        delay = RESTART_S if steady else min(2 * delay, RESTART_MAX_S)


def log_exit(name: str, log: logging.Logger, code: int) -> None:
    """Say how a child that was not asked to stop ended."""
    if code < 0:
        # Under systemd a stop signals the whole unit, the child too.
        log.warning("the %s was stopped by %s", name, signal.Signals(-code).name)
    else:
        log.error("the %s exited with status %d", name, code)


async def stop(child: Process, name: str, log: logging.Logger, within_s: float) -> None:
    """Close *child*'s standard input, which stops it; kill it if it has not
    stopped within *within_s* (what it has under way gets that long)."""
    assert child.stdin is not None
    await child.stdin.aclose()
    with anyio.move_on_after(within_s) as waiting:
        await child.wait()
    if waiting.cancelled_caught:
        log.warning("the %s did not stop within %g s: killed", name, within_s)
        child.kill()
    await child.aclose()


async def lines(stream: ByteReceiveStream) -> AsyncIterator[str]:
    """*stream*'s lines, without their ends, until it ends; a line longer
    than ``LINE_BYTES`` keeps its last ones."""
    pending = b""
    async for chunk in stream:
        *whole, pending = (pending + chunk).split(b"\n")
        for line in whole:
            yield line[-LINE_BYTES:].decode(errors="replace")
        pending = pending[-LINE_BYTES:]
    if pending:
        yield pending.decode(errors="replace")
