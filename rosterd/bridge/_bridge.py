"""An IRC network as a rosterd frontend: one worker, mapped channels.

Every line said in a mapped channel is posted to its rosterd channel under
the speaker's nick, so the worker's session there sees the whole channel.
The worker answers when addressed (``nick: …``, ``@nick``, or a private
message), or every line where a channel's ``reply`` is ``all``. A speaker's
lines less than ``debounce_s`` apart are held together, up to
``BURST_LINES`` of them: once one of them addresses the worker they are one
turn, else they are posted as they were said. Private messages are direct
runs of the worker, one per turn.

Turns cost, so each host has budgets (a burst, then one per interval): one
for private lines (``private_rate``), each line counted; one for turns
asked in channels (``mention_rate``), each addressed burst counted once it
closes. A private line past its budget is not read; an addressed burst
past it runs no turn and is posted like any other. Either way the nick is
told once, with a notice to it alone, so a flood costs no turns and draws
no flood back, in private or in the channel.

What reaches rosterd goes through one ordered queue: posts, turns and gate
commands are delivered in the order they were said. While the daemon is
away the queue holds (up to ``queue_limit``, oldest first to go) and the
bridge reconnects with backoff; a turn cut off by the daemon going away is
sent once more if none of its reply was said yet, else reported.
"""

from __future__ import annotations

import fnmatch
import logging
import math
from collections import deque
from pathlib import Path
from typing import Literal

import anyio
import msgspec
from anyio.abc import TaskGroup

from .._bridge_defaults import DEBOUNCE_S, MAX_LINES, MENTION_RATE, PRIVATE_RATE, SEND_RATE, Rate
from .._clock import LOOP_CLOCK, Clock
from .._errors import RosterError
from ..client import RosterClient, RpcError
from ..protocol import SESSION_ERROR, Delta
from ._budget import HostBudgets
from ._irc import IrcLink, IrcMessage
from ._lines import addressed, clean, reply_lines

log = logging.getLogger("rosterd.bridge")

ReplyMode = Literal["mention", "all"]


class BridgeConfig(msgspec.Struct, frozen=True):
    """What ``roster bridge irc`` was told: the daemon, the server, the worker
    and the channel map (IRC channel to rosterd channel)."""

    socket: Path
    host: str
    port: int
    nick: str
    worker: str
    channels: dict[str, str]
    reply: dict[str, ReplyMode] = {}
    tls: bool = False
    debounce_s: float = DEBOUNCE_S
    max_lines: int = MAX_LINES
    # How fast the bridge sends lines.
    send_rate: Rate = SEND_RATE
    # What one host may send in private, and ask in channels: turns that cost.
    private_rate: Rate = PRIVATE_RATE
    mention_rate: Rate = MENTION_RATE
    # nick!user@host masks (glob) that may resolve gates.
    operators: tuple[str, ...] = ()
    queue_limit: int = 1000
    backoff_s: float = 0.5
    # A server silent this long is pinged; silent twice as long, it is left.
    keepalive_s: float = 60.0


class _Post(msgspec.Struct, frozen=True):
    channel: str
    nick: str
    text: str


class _Turn(msgspec.Struct, frozen=True):
    target: str  # where the reply goes: an IRC channel, or the speaker's nick
    channel: str | None  # the rosterd channel; None: a direct run
    nick: str
    text: str


class _Command(msgspec.Struct, frozen=True):
    target: str
    channel: str
    mask: str
    nick: str
    text: str


_Job = _Post | _Turn | _Command


# What a nick past a budget is told, once: a private line past it is not
# read, an addressed burst past it is not answered (only posted).
_UNREAD = (
    "Sorry, that is more messages than I can take for now, so I did not read "
    "that one: please write again in {wait} s."
)
_UNANSWERED = (
    "Sorry, that is more questions than I can take for now, so I did not answer "
    "that one: please ask again in {wait} s."
)

# The most lines one burst holds: a speaker who never pauses still gets a
# turn this often, and the lines others say meanwhile do not wait behind
# theirs without end.
BURST_LINES = 20


class _Burst:
    """A speaker's lines less than ``debounce_s`` apart: whether one
    addresses the worker, how many there are, whether it is over, and an
    event set when another line comes."""

    def __init__(self, nick: str, host: str) -> None:
        self.nick = nick
        self.host = host
        self.addressed = False
        self.lines = 0
        self.over = False
        self.more = anyio.Event()

    @property
    def full(self) -> bool:
        return self.lines >= BURST_LINES


class _Line(msgspec.Struct, frozen=True):
    burst: _Burst
    text: str


class IrcBridge:
    """Run with ``await bridge.run()``; ends when cancelled. The budgets and
    the pace of what it sends run on *clock*."""

    def __init__(self, config: BridgeConfig, clock: Clock = LOOP_CLOCK) -> None:
        self.config = config
        self._clock = clock
        # Budgets go by host, not nick: a nick changes with /nick, and the
        # ident before the @ with a reconnection (the client picks it), but
        # the host is the address the server saw (or its cloak), so a new
        # budget costs a new address. People behind one address (a NAT, a
        # bouncer) share one.
        self._private = HostBudgets(config.private_rate)
        self._mentions = HostBudgets(config.mention_rate)
        self._jobs: deque[_Job] = deque()
        self._queued = anyio.Event()
        # Per IRC target (a channel, or a nick for private messages): the
        # lines not yet delivered, in the order they were said, and each
        # speaker's burst still open.
        self._said: dict[str, deque[_Line]] = {}
        self._bursts: dict[tuple[str, str], _Burst] = {}
        self._sessions: dict[str, str] = {}
        self._client: RosterClient | None = None
        self._link: IrcLink | None = None
        self._group: TaskGroup | None = None
        # Set each time the queue is empty and nothing is in flight, and once
        # the bridge is in its channels (tests and frontends await them).
        self.idle = anyio.Event()
        self.joined = anyio.Event()

    def __repr__(self) -> str:
        return (
            f"IrcBridge({self.config.nick!r} for {self.config.worker!r}, {len(self._jobs)} queued)"
        )

    async def run(self) -> None:
        config = self.config
        link = IrcLink(
            config.host,
            config.port,
            config.nick,
            list(config.channels),
            tls=config.tls,
            send_rate=config.send_rate,
            backoff_s=config.backoff_s,
            keepalive_s=config.keepalive_s,
            clock=self._clock,
        )
        try:
            async with link, anyio.create_task_group() as tg:
                self._link, self._group = link, tg
                tg.start_soon(self._deliver)
                tg.start_soon(self._note_joined, link)
                async for message in link.messages:
                    self._heard(message)
        finally:
            await self._drop_client()

    async def _note_joined(self, link: IrcLink) -> None:
        await link.joined()
        self.joined.set()

    @property
    def nick(self) -> str:
        """The nick the bridge has on the server now."""
        return self._link.nick if self._link is not None else self.config.nick

    @property
    def renamed(self) -> anyio.Event:
        """Set once the bridge has taken its own nick back from another."""
        assert self._link is not None
        return self._link.renamed

    async def rejoined(self, times: int) -> None:
        """Wait until the bridge has been in its channels *times* times: the
        first connection, then each reconnection to the IRC server."""
        assert self._link is not None
        await self._link.joined(times)

    # IRC side ---------------------------------------------------------------

    def _heard(self, message: IrcMessage) -> None:
        assert self._link is not None and self._group is not None
        text = clean(message.text)
        if not text or message.notice:
            return
        channel = None if message.private else self._mapped(message.target)
        if not message.private and channel is None:
            return
        host = message.host.lower()
        if message.private and not self._within_budget(self._private, host, message.nick, _UNREAD):
            return
        if text.startswith("!") and channel is not None:
            self._enqueue(_Command(message.target, channel, message.mask, message.nick, text))
            return
        key = (message.target, message.nick)
        burst = self._bursts.get(key)
        if burst is None:
            burst = self._bursts[key] = _Burst(message.nick, host)
            self._group.start_soon(self._close_when_quiet, message.target, burst)
        self._said.setdefault(message.target, deque()).append(_Line(burst, text))
        burst.lines += 1
        if burst.full:
            # The speaker's next line starts a burst of its own.
            del self._bursts[key]
        burst.more.set()
        mode = self.config.reply.get(message.target.lower(), "mention")
        burst.addressed |= message.private or mode == "all" or addressed(text, self._link.nick)

    def _within_budget(self, budgets: HostBudgets, host: str, nick: str, refusal: str) -> bool:
        """Whether a turn of *nick*'s fits its host's budget. The first one
        past it gets *refusal*, a notice to *nick* alone, the rest nothing:
        a flood draws no flood."""
        assert self._link is not None
        refused = budgets.take(host, self._clock())
        if refused is None:
            return True
        if refused.first:
            told = refusal.format(wait=math.ceil(refused.wait_s))
            log.warning("%s (%s) is past its budget of %s: told %r", nick, host, budgets.rate, told)
            self._link.say(nick, told, "notice")
        return False

    def _mapped(self, target: str) -> str | None:
        for irc_channel, channel in self.config.channels.items():
            if irc_channel.lower() == target.lower():
                return channel
        return None

    async def _close_when_quiet(self, target: str, burst: _Burst) -> None:
        """Once *burst*'s speaker has been quiet for ``debounce_s``: a turn if
        it addressed the worker within its host's budget, with everything
        said before it posted first; else its lines are posted as they come
        to the head of the line, so posts keep the order they were said in.
        A full burst closes at once."""
        while burst.more.is_set() and not burst.full:
            burst.more = anyio.Event()
            with anyio.move_on_after(self.config.debounce_s):
                await burst.more.wait()
        burst.over = True
        if not burst.full:
            del self._bursts[(target, burst.nick)]
        said = self._said[target]
        channel = self._mapped(target)
        if burst.addressed and channel is not None:
            # Charged here, as the turn is made: a burst is one turn however
            # many of its lines address the worker. Private lines were, as
            # they came.
            burst.addressed = self._within_budget(
                self._mentions, burst.host, burst.nick, _UNANSWERED
            )
        if burst.addressed:
            last = max(i for i, line in enumerate(said) if line.burst is burst)
            asked = []
            # Lines of a burst still open (said before this full one closed)
            # are its own: they stay, in order, for when it closes.
            still_open: list[_Line] = []
            for _ in range(last + 1):
                line = said.popleft()
                if line.burst is burst:
                    asked.append(line.text)
                elif not line.burst.over:
                    still_open.append(line)
                elif channel is not None:
                    self._enqueue(_Post(channel, line.burst.nick, line.text))
            said.extendleft(reversed(still_open))
            self._enqueue(_Turn(target, channel, burst.nick, "\n".join(asked)))
        while said and said[0].burst.over and not said[0].burst.addressed:
            line = said.popleft()
            if channel is not None:
                self._enqueue(_Post(channel, line.burst.nick, line.text))

    def _enqueue(self, job: _Job) -> None:
        if len(self._jobs) >= self.config.queue_limit:
            dropped = self._jobs.popleft()
            log.warning("queue full (%d): dropped %r", self.config.queue_limit, dropped)
        self._jobs.append(job)
        self.idle = anyio.Event()
        self._queued.set()

    # rosterd side -------------------------------------------------------------

    async def _deliver(self) -> None:
        """Deliver the queue in order, reconnecting to the daemon as needed."""
        while True:
            if not self._jobs:
                self.idle.set()
                self._queued = anyio.Event()
                await self._queued.wait()
                continue
            job = self._jobs[0]
            client = await self._connected()
            try:
                await self._do(client, job, retry=True)
            except _Gone:
                await self._drop_client()
                continue
            self._jobs.popleft()

    async def _connected(self) -> RosterClient:
        delay = self.config.backoff_s
        while self._client is None:
            try:
                self._client = await RosterClient.connect(self.config.socket)
                log.warning("connected to rosterd at %s", self.config.socket)
            except RosterError as exc:
                log.warning("%s; retrying in %.1f s", exc, delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, 10.0)
        return self._client

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        self._sessions.clear()
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def _do(self, client: RosterClient, job: _Job, *, retry: bool) -> None:
        try:
            match job:
                case _Post(channel=channel, nick=nick, text=text):
                    await client.channel_post(channel, nick, text)
                case _Turn():
                    await self._turn(client, job, retry=retry)
                case _Command():
                    await self._command(client, job)
        except RpcError as exc:
            log.warning("rosterd refused %r: %s", job, exc)
            if isinstance(job, _Turn | _Command):
                self._say(job.target, f"{job.nick}: {exc}")
        except (RosterError, OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise _Gone(str(exc)) from exc

    async def _turn(self, client: RosterClient, job: _Turn, *, retry: bool) -> None:
        target = job.target
        prefix = "" if job.channel is None else f"{job.nick}: "
        speaker = _Speaker(self, target, prefix)
        try:
            if job.channel is None:
                await client.run_direct(self.config.worker, job.text, job.nick, speaker.delta)
            else:
                session = await self._session(client, job.channel)
                try:
                    result = await client.session_send(session, job.text, job.nick, speaker.delta)
                except RpcError as exc:
                    if exc.code != SESSION_ERROR:
                        raise
                    # Expired or closed elsewhere: nothing of the turn was recorded.
                    self._sessions.pop(job.channel, None)
                    session = await self._session(client, job.channel)
                    result = await client.session_send(session, job.text, job.nick, speaker.delta)
                if result.run != session:
                    self._sessions[job.channel] = result.run  # rolled over
        except (RosterError, OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            if isinstance(exc, RpcError):
                raise
            if speaker.said or not retry:
                self._say(target, f"{prefix}rosterd went away while answering; ask again ({exc})")
                return
            raise _Gone(str(exc)) from exc
        speaker.finish()

    async def _session(self, client: RosterClient, channel: str) -> str:
        if channel not in self._sessions:
            opened = await client.session_open(self.config.worker, channel)
            self._sessions[channel] = opened.session
        return self._sessions[channel]

    async def _command(self, client: RosterClient, job: _Command) -> None:
        word, _, rest = job.text.partition(" ")
        match word.lower():
            case "!gates":
                gates = await client.gate_list(self.config.worker)
                open_here = [g for g in gates if g.status == "open" and g.channel == job.channel]
                if not open_here:
                    self._say(job.target, f"{job.nick}: no open gates in #{job.channel}")
                for state in open_here[: self.config.max_lines]:
                    self._say(job.target, f"{state.id}: {state.summary}")
            case "!approve" | "!reject":
                gate, _, note = rest.strip().partition(" ")
                if not any(fnmatch.fnmatchcase(job.mask, m) for m in self.config.operators):
                    self._say(job.target, f"{job.nick}: only operators may resolve gates")
                    return
                if not gate:
                    self._say(job.target, f"{job.nick}: which gate? {word} GATE [note]")
                    return
                outcome = "approved" if word.lower() == "!approve" else "rejected"
                resolved = await client.gate_resolve(gate, outcome, note.strip())
                self._say(job.target, f"{resolved.id} {resolved.outcome} by {job.nick}")
            case _:
                # Not a command of ours: a line like any other.
                self._enqueue(_Post(job.channel, job.nick, job.text))

    def _say(self, target: str, text: str) -> None:
        assert self._link is not None
        budget = self._link.line_budget(target)
        for line in reply_lines(text, budget, self.config.max_lines, "…"):
            self._link.say(target, line)


class _Gone(Exception):
    """The daemon went away: the job stays queued until it is back."""


class _Speaker:
    """A reply said line by line as its lines complete: the first addressed
    to the speaker, at most ``max_lines``, the last of them saying where the
    rest is when there is more. A fitted line is held until the next one
    comes, so a reply of exactly ``max_lines`` lines is never cut."""

    def __init__(self, bridge: IrcBridge, target: str, prefix: str) -> None:
        assert bridge._link is not None
        self._link = bridge._link
        self._limit = bridge.config.max_lines
        self._target = target
        self._prefix = prefix
        self._pending = ""
        self._waiting: str | None = None
        self._lines = 0
        self._run = ""
        self._cut = False
        self.said = False

    async def delta(self, delta: Delta) -> None:
        self._run = delta.run
        self._pending += delta.text
        *complete, self._pending = self._pending.split("\n")
        for line in complete:
            self._line(line)

    def finish(self) -> None:
        self._line(self._pending)
        self._pending = ""
        if self._waiting is not None and not self._cut:
            self._say(self._waiting)

    def _line(self, text: str) -> None:
        budget = self._link.line_budget(self._target) - len(self._prefix.encode())
        for piece in reply_lines(text, budget, 1 << 30, ""):
            if self._waiting is not None:
                self._emit(self._waiting)
            self._waiting = piece

    def _emit(self, line: str) -> None:
        """Say *line*, which another follows: in the last slot, the note instead."""
        if self._cut:
            return
        if self._lines == self._limit - 1:
            self._say(f"… (the rest: roster server runs show {self._run})")
            self._cut = True
            return
        self._say(line)

    def _say(self, line: str) -> None:
        first = self._prefix if self._lines == 0 else ""
        budget = self._link.line_budget(self._target)
        self._link.say(self._target, reply_lines(first + line, budget, 1, "")[0])
        self._lines += 1
        self.said = True
