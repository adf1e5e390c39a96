"""The inspector: a read-only web app over the run store.

Everything it shows was written by others (notes, posts, tool results,
model replies), so every page is rendered with Jinja2's autoescaping and a
filter that makes invisible controls visible, under a Content-Security-
Policy that allows no inline script or style and nothing from elsewhere.
Only GET and HEAD are served, and of what another site's page asks
for (as the browser's Sec-Fetch headers tell), only a link followed: a
page its owner visits cannot make the browser search every trace for it,
nor time the answers. Off loopback, every request needs the token:
as a bearer header, or a cookie set once from ``/?token=…``. Without one,
only a request that names a loopback host is served: a page elsewhere that
points its own name at 127.0.0.1 (DNS rebinding) reads nothing.
"""

from __future__ import annotations

import hmac
import math
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from importlib.resources import files
from typing import Any
from urllib.parse import urlencode

import jinja2
import msgspec
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import InvalidIdError, NotFoundError, RosterError
from ..compiler import ADVISORY_ORDER, iso_time
from ..org import is_loopback
from ..protocol import context_json_items
from ..stores import RunReader
from ._views import (
    RUNS_PER_PAGE,
    Filters,
    TurnRow,
    load_requests,
    load_run,
    load_runs,
    load_turn,
    load_turns_after,
    search,
    summed,
)

COOKIE = "roster_inspect"
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = [
    (b"content-security-policy", _CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
# A chart's bars at most: past it, each bar sums as many turns as it takes,
# so a run of 100,000 turns draws a page no bigger than one of 200.
CHART_COLUMNS = 200
_STATIC = {"inspect.css": "text/css", "inspect.js": "text/javascript"}
# A Host header: a name or an IPv4 address, or an IPv6 one in brackets; a port.
_HOST = re.compile(r"(?:\[(?P<v6>[^\]]*)\]|(?P<name>[^:\[\]]*))(?::[0-9]*)?")
# Characters that change how text around them reads without showing
# themselves: C0 and C1 controls, bidi controls (the Arabic letter mark
# too), line and paragraph separators, zero widths and joiners, invisible
# fillers and annotations, and the tag characters, which spell out text
# a model reads and a person does not see.
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb"
    "\U000e0000-\U000e007f]"
)

Stores = Callable[[], AbstractAsyncContextManager[RunReader]]


def create_app(stores: Stores, token: str | None = None) -> ASGIApp:
    """The inspector over the runs *stores* opens per request; with *token*,
    every request must carry it."""
    pages = _Pages(stores)
    app = Starlette(
        routes=[
            Route("/", pages.runs, methods=["GET"]),
            Route("/search", pages.search, methods=["GET"]),
            Route("/static/{name}", pages.static, methods=["GET"]),
            Route("/runs/{run}", pages.run, methods=["GET"]),
            Route("/runs/{run}/turns.json", pages.live, methods=["GET"]),
            Route("/runs/{run}/turns/{turn}", pages.turn, methods=["GET"]),
            Route("/runs/{run}/turns/{turn}/request.json", pages.raw, methods=["GET"]),
        ],
        exception_handlers={RosterError: pages.missing, HTTPException: pages.refused},
    )
    return _Guard(app, token)


class _Pages:
    """Each page: read what it shows from a store, render it."""

    def __init__(self, stores: Stores) -> None:
        self._stores = stores
        self._env = _environment()

    def __repr__(self) -> str:
        return f"_Pages({self._stores!r})"

    def _page(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        return HTMLResponse(self._env.get_template(name).render(**values), status_code=status)

    async def runs(self, request: Request) -> Response:
        filters = _filters(request)
        number = _int(request.query_params.get("page"), 0)
        async with self._stores() as store:
            listed = await load_runs(store, filters, number)
        query = {k: v for k, v in msgspec.structs.asdict(filters).items() if v}
        return self._page(
            "runs.html",
            rows=listed.rows,
            unreadable=listed.unreadable,
            filters=filters,
            page=number,
            more=listed.more,
            per_page=RUNS_PER_PAGE,
            prev_query=urlencode({**query, "page": number - 1}),
            next_query=urlencode({**query, "page": number + 1}),
        )

    async def run(self, request: Request) -> Response:
        number = _int(request.query_params.get("page"), 0)
        async with self._stores() as store:
            view = await load_run(store, request.path_params["run"], number)
        return self._page("run.html", view=view, charts=_charts(view.turns))

    async def live(self, request: Request) -> Response:
        after = _int(request.query_params.get("after"), 0)
        async with self._stores() as store:
            info, rows = await load_turns_after(store, request.path_params["run"], after)
        turns = [msgspec.to_builtins(row) for row in rows]
        return JSONResponse({"status": info.status, "turns": turns})

    async def turn(self, request: Request) -> Response:
        run, number = request.path_params["run"], _turn(request)
        async with self._stores() as store:
            view = await load_turn(store, run, number)
        return self._page("turn.html", view=view)

    async def raw(self, request: Request) -> Response:
        """The turn's requests, byte for byte as ``runs context --all --json``."""
        run, number = request.path_params["run"], _turn(request)
        async with self._stores() as store:
            requests = await load_requests(store, run, number)
        body = b"[\n" + b",\n".join(context_json_items(requests)) + b"\n]\n"
        disposition = f'attachment; filename="{run}-turn-{number}.json"'
        headers = {"content-disposition": disposition}
        return Response(body, media_type="application/json", headers=headers)

    async def search(self, request: Request) -> Response:
        text = request.query_params.get("q", "")[:1000]
        async with self._stores() as store:
            hits, unreadable = await search(store, text)
        return self._page("search.html", text=text, hits=hits, unreadable=unreadable)

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            raise HTTPException(404)
        data = files(__package__).joinpath("static", name).read_bytes()
        return Response(data, media_type=_STATIC[name])

    async def missing(self, request: Request, exc: Exception) -> Response:
        """404 for what is not there; 503 for a state that cannot be read
        (its directory gone, its database down), which is no answer."""
        message = str(exc) if isinstance(exc, RosterError) else "no such page"
        if isinstance(exc, InvalidIdError | NotFoundError):
            return self._page("error.html", 404, heading="Nothing here", message=message)
        return self._page("error.html", 503, heading="The runs cannot be read", message=message)

    async def refused(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return self._page("error.html", status, heading="Nothing here", message=f"HTTP {status}")


class _Guard:
    """GET and HEAD only, the token where one is set, and the security
    headers on every response."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self._app = app
        self._token = token

    def __repr__(self) -> str:
        return f"_Guard(token={'set' if self._token else 'none'})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self._app(scope, receive, send)

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        if scope["method"] not in ("GET", "HEAD"):
            response: Response = Response("only GET and HEAD\n", 405, {"allow": "GET, HEAD"})
            return await response(scope, receive, secured)
        request = Request(scope)
        if _from_another_site(request):
            response = Response("only a link from another site's page is followed\n", 403)
            return await response(scope, receive, secured)
        if self._token is None and not _loopback_host(request.headers.get("host", "")):
            response = Response(
                "without a token the inspector answers to a loopback name only\n", 421
            )
            return await response(scope, receive, secured)
        if self._token is not None and not self._allowed(request):
            given = request.query_params.get("token")
            if given is not None and _same(given, self._token):
                # The one-time URL: the token moves into a cookie and out of
                # the address. Lax, not strict: a strict cookie is not sent
                # after a link from another site, nor on reloading its page;
                # what else another site asks for is refused above.
                response = RedirectResponse(request.url.path, 303)
                response.set_cookie(COOKIE, self._token, httponly=True, samesite="lax", path="/")
                return await response(scope, receive, secured)
            response = Response("a token is required\n", 401, {"www-authenticate": "Bearer"})
            return await response(scope, receive, secured)
        await self._app(scope, receive, secured)

    def _allowed(self, request: Request) -> bool:
        assert self._token is not None
        header = request.headers.get("authorization", "")
        offered = header.removeprefix("Bearer ") if header.startswith("Bearer ") else None
        offered = offered or request.cookies.get(COOKIE)
        return offered is not None and _same(offered, self._token)


def _same(offered: str, token: str) -> bool:
    """Whether *offered* is *token*, in constant time (as bytes: a string
    compare refuses any that is not ASCII)."""
    return hmac.compare_digest(offered.encode(), token.encode())


def _from_another_site(request: Request) -> bool:
    """Whether a browser says another site's page made *request*, other
    than by following a link: an image, a frame, a script's fetch. A
    browser that says nothing (an old one, curl) is taken at its word."""
    headers = request.headers
    if headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none"):
        return False
    followed = headers.get("sec-fetch-mode") == "navigate"
    return not (followed and headers.get("sec-fetch-dest") == "document")


def _loopback_host(header: str) -> bool:
    """Whether a Host header names this machine: localhost, 127.x or ::1."""
    match = _HOST.fullmatch(header)
    return match is not None and is_loopback((match["v6"] or match["name"] or "").lower())


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__ or "rosterd.inspect", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shown"] = shown
    # The input part's advisory blocks, in the order it shows them.
    env.globals["advisory"] = ADVISORY_ORDER
    env.filters["when"] = lambda at: iso_time(at) if at else "-"
    env.filters["usd"] = lambda usd: "unknown" if usd is None else f"${usd:.6f}"
    env.filters["pct"] = lambda share: f"{share:.0%}"
    return env


def shown(text: str) -> Markup:
    """*text* escaped, with each invisible control shown as its code point."""
    escaped = str(escape(text))
    return Markup(_INVISIBLE.sub(lambda m: f"<span class=ctl>U+{ord(m[0]):04X}</span>", escaped))


def _filters(request: Request) -> Filters:
    query = request.query_params
    return Filters(
        **{
            name: query.get(name, "")[:64]
            for name in ("worker", "channel", "surface", "status", "verdict")
        }
    )


def _turn(request: Request) -> int:
    """The turn number in the path: digits, not so many that no run has it
    (nor so many that Python refuses to read them)."""
    text = request.path_params["turn"]
    if re.fullmatch("[0-9]{1,9}", text) is None:
        raise HTTPException(404)
    return int(text)


def _int(text: str | None, default: int) -> int:
    try:
        return max(0, int(text)) if text is not None else default
    except ValueError:
        return default


class Chart(msgspec.Struct, frozen=True):
    """An SVG bar chart's bars, in the chart's own coordinates."""

    width: int
    height: int
    bars: list[tuple[float, float, float, float, str]]
    label: str


def _charts(turns: Sequence[TurnRow]) -> list[Chart]:
    """Cached share, and input and output tokens, per turn (or per run of
    turns, past ``CHART_COLUMNS`` of them)."""
    per = max(1, -(-len(turns) // CHART_COLUMNS))
    columns = [summed(0, turns[at : at + per]) for at in range(0, len(turns), per)]
    each = "turn" if per == 1 else f"{per} turns"
    count = max(len(columns), 1)
    width, height = 800, 120
    step = width / count
    shares = [
        (i * step, height * (1 - t.cached_share), max(step - 1, 0.5), height * t.cached_share, "")
        for i, t in enumerate(columns)
    ]
    most = max((t.input_tokens + t.output_tokens for t in columns), default=0) or 1
    tokens = []
    for i, t in enumerate(columns):
        cached = height * t.cached_tokens / most
        fresh = height * (t.input_tokens - t.cached_tokens) / most
        output = height * t.output_tokens / most
        x, w = i * step, max(step - 1, 0.5)
        tokens.append((x, height - cached, w, cached, "cached"))
        tokens.append((x, height - cached - fresh, w, fresh, "fresh"))
        tokens.append((x, height - cached - fresh - output, w, output, "output"))
    return [
        Chart(
            width, height, [b for b in shares if not math.isnan(b[3])], f"cached share per {each}"
        ),
        Chart(width, height, tokens, f"tokens per {each} (tallest {most})"),
    ]
