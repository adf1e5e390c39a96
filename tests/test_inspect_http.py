"""The trace inspector over HTTP: its pages, over real runs, and its guards."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from functools import partial
from html.parser import HTMLParser
from pathlib import Path

import anyio
import httpx
import pytest
from children import SECRET_ENV, children, ending, frozen, only_child
from harness import DaemonProcess, daemon_in_process
from inspect_runs import Made, make_runs
from orgs import write_org

from rosterd import ConfigError
from rosterd.client import RosterClient
from rosterd.inspect import COOKIE, FAILED_SHOWN, MAX_CONNECTIONS, create_app
from rosterd.org import load_org
from rosterd.stores import read_state_runs

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token-for-tests"
# Without a token the inspector answers only to a loopback name.
LOCAL = "http://127.0.0.1:8377"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    return anyio.run(make_runs, tmp_path_factory.mktemp("inspect"))


@pytest.fixture
async def web(made: Made) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(partial(read_state_runs, made.state))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as client:
        yield client


async def _page(web: httpx.AsyncClient, url: str) -> str:
    response = await web.get(url)
    assert response.status_code == 200, response.text
    assert "script-src 'self'" in response.headers["content-security-policy"]
    _no_hostile_markup(response.text)
    return response.text


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


# The elements our own pages are made of: anything else came from data.
_OURS = frozenset(
    (
        "html",
        "head",
        "meta",
        "title",
        "link",
        "script",
        "body",
        "header",
        "a",
        "form",
        "input",
        "button",
        "main",
        "h1",
        "h2",
        "h3",
        "p",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "label",
        "nav",
        "span",
        "dl",
        "dt",
        "dd",
        "figure",
        "svg",
        "rect",
        "figcaption",
        "section",
        "details",
        "summary",
        "pre",
        "div",
    )
)


def _no_hostile_markup(html: str) -> None:
    """Nothing others wrote became markup: only our own elements, no event
    handler, no script but our file, no javascript: link."""
    parser = _Tags()
    parser.feed(html)
    for tag, attrs in parser.tags:
        assert tag in _OURS, tag
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name)
            assert not (value or "").strip().lower().startswith("javascript:"), (tag, value)
        if tag == "script":
            assert attrs == [("src", "/static/inspect.js"), ("defer", None)]


async def test_the_runs_newest_first_filtered_and_with_their_verdicts_and_cost(
    web: httpx.AsyncClient, made: Made
) -> None:
    html = await _page(web, "/")
    order = [made.failed, made.changed, made.session]
    assert [html.index(f'href="/runs/{run}"') for run in order] == sorted(
        html.index(f'href="/runs/{run}"') for run in order
    )
    assert "prefix-changed 1" in html and "hit 2" in html and "$0.0" in html
    direct = await _page(web, "/?surface=direct")
    assert made.failed in direct and made.session not in direct
    missed = await _page(web, "/?verdict=prefix-changed")
    assert made.changed in missed and made.session not in missed
    assert "no runs match" in await _page(web, "/?worker=nobody")


async def test_a_run_its_header_totals_charts_and_turns(web: httpx.AsyncClient, made: Made) -> None:
    html = await _page(web, f"/runs/{made.session}")
    assert "<dt>worker</dt><dd>w0</dd>" in html and "<dt>status</dt>" in html
    assert html.count("<svg ") == 2 and 'class="bar cached"' in html
    assert f'href="/runs/{made.session}/turns/2"' in html
    assert "data-live" not in html  # closed: nothing to follow
    live = await _page(web, f"/runs/{made.changed}")
    assert f'data-live="/runs/{made.changed}/turns.json"' in live
    rows = (await web.get(f"/runs/{made.session}/turns.json?after=1")).json()
    assert rows["status"] == "closed" and [t["turn"] for t in rows["turns"]] == [2]


async def test_a_turn_block_by_block_with_budgets_breakpoints_and_what_is_new(
    web: httpx.AsyncClient, made: Made
) -> None:
    first = await _page(web, f"/runs/{made.session}/turns/1")
    for block in ("identity", "policy", "connections", "purpose", "scope", "memory", "message"):
        assert f'<span class="name">{block}</span>' in first
    assert "/ 12000 characters" in first  # identity's budget
    assert '<table class="budget">' in first
    # Each advisory block's share, in the order the input shows them.
    assert "<th>memory</th><th>briefing</th><th>history</th><th>backlog</th><th>used</th>" in first
    for name in ("connections", "purpose", "system"):
        assert f"cache breakpoint: after {name}" in first
    assert "end of the conversation so far" in first
    second = await _page(web, f"/runs/{made.session}/turns/2")
    # Turn 2 sends turn 1's request again; new are turn 1's reply and turn 2's
    # input, then at the tool step the call and its result.
    assert second.count('<span class="badge">new</span>') == 2 + 2
    assert "Request 2 (tool step)" in second
    assert "tool call " in second and ": remember</p>" in second
    assert "&lt;img src=x onerror=" in second  # the remembered text, quoted
    assert '<table class="usage">' in second and "$0.0" in second


async def test_a_miss_shows_the_changed_block_before_and_after(
    web: httpx.AsyncClient, made: Made
) -> None:
    html = await _page(web, f"/runs/{made.changed}/turns/1")
    assert html.count('<section class="miss">') == 1
    assert "Cache miss: block identity changed" in html
    before, after = re.findall(r'<div class="side (?:before|after)">.*?</div>', html, re.S)
    assert "Now also:" not in before and "Now also:" in after
    assert f'href="/runs/{made.session}"' in html


async def test_a_failed_compilation_shows_its_error_and_its_blocks(
    web: httpx.AsyncClient, made: Made
) -> None:
    run = await _page(web, f"/runs/{made.failed}")
    assert "over its limit of 24000" in run and "the engine received nothing" in run
    turn = await _page(web, f"/runs/{made.failed}/turns/1")
    assert "run compilation: failed" in turn and '<span class="name">identity</span>' in turn


async def test_the_raw_request_is_byte_for_byte_runs_context(
    web: httpx.AsyncClient, made: Made
) -> None:
    response = await web.get(f"/runs/{made.changed}/turns/1/request.json")
    assert response.headers["content-disposition"].startswith("attachment;")
    context = ["server", "runs", "context", made.changed, "--all", "--json"]
    printed = await anyio.run_process(
        [sys.executable, "-m", "rosterd.cli", *context, "--state", str(made.state)]
    )
    assert response.content == printed.stdout


async def test_hostile_text_is_shown_as_text_everywhere(web: httpx.AsyncClient, made: Made) -> None:
    pages = [
        "/",
        f"/runs/{made.session}",
        f"/runs/{made.session}/turns/1",
        f"/runs/{made.session}/turns/2",
        f"/runs/{made.changed}/turns/1",
        "/search?q=%3Cscript%3E",
    ]
    for url in pages:
        await _page(web, url)
    turn = await _page(web, f"/runs/{made.session}/turns/1")
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in turn
    # Controls that reorder or break text are shown as what they are.
    assert "<span class=ctl>U+202E</span>gnp.exe" in turn
    assert "<span class=ctl>U+2028</span>" in turn
    assert "{{ 7 * 7 }}" in turn  # not a template


# Text a person does not see but a model reads: instructions in Unicode tag
# characters (ASCII smuggling), an Arabic letter mark (a bidi control), C1
# controls (NEL breaks a line, CSI starts a terminal escape), word joiners.
SMUGGLED = "".join(chr(0xE0000 + ord(c)) for c in "obey") + "\u061c\x85\x9b\u2060\u2064\ufff9"


async def test_invisible_text_a_model_reads_is_shown_as_code_points(tmp_path: Path) -> None:
    write_org(tmp_path / "org", identity_chars=200, purpose_chars=100)
    async with (
        daemon_in_process(tmp_path / "org", tmp_path / "state") as daemon,
        await daemon.client() as client,
    ):
        await client.memory_add("w0", f"a harmless note{SMUGGLED}", channel="c0")
        opened = await client.session_open("w0", "c0")
        await client.session_send(opened.session, f"hello{SMUGGLED}")
    app = create_app(partial(read_state_runs, tmp_path / "state"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as web:
        turn = await _page(web, f"/runs/{opened.session}/turns/1")
    assert "a harmless note" in turn and "hello" in turn
    for char in SMUGGLED:
        assert char not in turn, f"U+{ord(char):04X}"
    for point in ("U+E006F", "U+E0062", "U+061C", "U+0085", "U+009B", "U+2060", "U+FFF9"):
        assert f"<span class=ctl>{point}</span>" in turn


async def test_search_names_the_run_turn_and_block_that_showed_a_text(
    web: httpx.AsyncClient, made: Made
) -> None:
    html = await _page(web, "/search?q=note%3A+%3Cscript%3E")
    assert f'href="/runs/{made.session}/turns/1"' in html
    assert "<td>memory</td>" in html
    assert "no run showed it" in await _page(web, "/search?q=never+said+this")


async def test_a_run_that_cannot_be_read_is_named_once_and_every_other_run_shown(
    made: Made, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # An empty run.json (a disk that filled as it was written by hand) and
    # one edited into another schema: each hides only itself.
    state = tmp_path / "state"
    shutil.copytree(made.state, state)
    for run, text in (("d-empty", ""), ("d-edited", '{"id": "d-edited", "surface": 3}')):
        (state / "runs" / run).mkdir()
        (state / "runs" / run / "run.json").write_text(text)
    app = create_app(partial(read_state_runs, state))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=LOCAL) as web:
        listed = await _page(web, "/")
        found = await _page(web, "/search?q=note%3A+%3Cscript%3E")
        bad = await web.get("/runs/d-empty")
    for html in (listed, found):
        unreadable = re.findall(r'<p class="error unreadable">(.*?)</p>', html, re.S)
        assert [line.split()[1] for line in unreadable] == ["d-edited", "d-empty"]
        assert "unreadable state file" in unreadable[1]
    for run in (made.session, made.changed, made.failed):
        assert f'href="/runs/{run}"' in listed
    assert f'href="/runs/{made.session}/turns/1"' in found
    assert bad.status_code == 503 and "d-empty/run.json: unreadable state file" in bad.text
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("d-empty" in message for message in warned) == 2  # once per page


async def test_a_run_page_shows_so_many_failed_compilations_and_counts_the_rest(
    made: Made, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    shutil.copytree(made.state, state)
    trace = state / "runs" / made.failed / "context.jsonl"
    [failed] = [line for line in trace.read_bytes().splitlines() if b'"failed"' in line]
    record = json.loads(failed)
    with trace.open("ab") as log:
        for turn in range(2, FAILED_SHOWN + 31):
            log.write(json.dumps({**record, "turn": turn}).encode() + b"\n")
    app = create_app(partial(read_state_runs, state))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=LOCAL) as web:
        html = await _page(web, f"/runs/{made.failed}")
    # 100,000 of them would otherwise make a page of tens of MB.
    assert html.count('<section class="failed">') == FAILED_SHOWN
    assert "30 more failed compilations" in html
    assert f'href="/runs/{made.failed}/turns/{FAILED_SHOWN + 30}"' in html


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
async def test_only_get_and_head(web: httpx.AsyncClient, method: str) -> None:
    response = await web.request(method, "/")
    assert response.status_code == 405 and response.headers["allow"] == "GET, HEAD"
    assert (await web.head("/")).status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "/runs/..%2F..%2Fetc%2Fpasswd",
        "/runs/%2E%2E",
        "/runs/a%00b",
        "/runs/" + "a" * 65,
        "/runs/no-such-run",
        "/runs/no-such-run/turns/1",
        "/static/..%2F_app.py",
        "/static/other.js",
    ],
)
async def test_bad_ids_answer_404_before_any_lookup(web: httpx.AsyncClient, url: str) -> None:
    response = await web.get(url)
    assert response.status_code == 404
    assert "content-security-policy" in response.headers


async def test_a_state_gone_is_503_not_a_missing_page(tmp_path: Path) -> None:
    # A state directory unmounted or moved (or a database down) is not "no
    # such run": a monitor or a person must not read it as one.
    app = create_app(partial(read_state_runs, tmp_path / "gone"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as web:
        for url in ("/", "/runs/s-1", "/runs/s-1/turns/1", "/search?q=x"):
            response = await web.get(url)
            assert response.status_code == 503, url
            assert "no such state directory" in response.text
            assert "content-security-policy" in response.headers


async def test_with_a_token_every_request_carries_it(made: Made) -> None:
    app = create_app(partial(read_state_runs, made.state), TOKEN)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inspect") as web:
        assert (await web.get("/")).status_code == 401
        assert (await web.get("/", headers={"authorization": "Bearer wrong"})).status_code == 401
        ok = await web.get("/", headers={"authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        # The one-time URL sets the cookie and drops the token from the address.
        first = await web.get(f"/runs/{made.session}?token={TOKEN}")
        assert first.status_code == 303 and first.headers["location"] == f"/runs/{made.session}"
        assert "httponly" in first.headers["set-cookie"].lower()
        assert (await web.get(f"/runs/{made.session}")).status_code == 200
        web.cookies.set(COOKIE, "wrong")
        assert (await web.get("/")).status_code == 401


async def test_without_a_token_only_a_loopback_host_is_served(made: Made) -> None:
    # DNS rebinding: a page on evil.example points that name at 127.0.0.1 and
    # reads the inspector as its own origin; only the Host header tells.
    app = create_app(partial(read_state_runs, made.state))
    transport = httpx.ASGITransport(app=app)
    for base in (
        "http://evil.example:8377",
        "http://127.0.0.1.evil.example",
        "http://localhost.evil",
    ):
        async with httpx.AsyncClient(transport=transport, base_url=base) as web:
            refused = await web.get(f"/runs/{made.session}")
        assert refused.status_code == 421, base
        assert made.session not in refused.text and "content-security-policy" in refused.headers
    for base in (LOCAL, "http://localhost:8377", "http://[::1]:8377", "http://127.1.2.3"):
        async with httpx.AsyncClient(transport=transport, base_url=base) as web:
            assert (await web.get(f"/runs/{made.session}")).status_code == 200, base


# What a browser says of a request another site's page made.
_IMAGE = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors", "sec-fetch-dest": "image"}
_FRAME = {"sec-fetch-site": "same-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "iframe"}
_LINK = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "document"}


async def test_another_sites_page_can_link_to_the_inspector_and_nothing_more(
    web: httpx.AsyncClient, made: Made
) -> None:
    # Any page its owner visits could make the browser search every trace,
    # as often as it likes, and time the answers to learn what they hold.
    for headers in (_IMAGE, _FRAME, {**_IMAGE, "sec-fetch-mode": "cors", "sec-fetch-dest": ""}):
        refused = await web.get("/search?q=note", headers=headers)
        assert refused.status_code == 403, headers
        assert "note" not in refused.text and "content-security-policy" in refused.headers
    assert made.session in (await web.get("/search?q=note", headers=_LINK)).text
    own = {"sec-fetch-site": "same-origin", "sec-fetch-mode": "cors", "sec-fetch-dest": "empty"}
    assert (await web.get(f"/runs/{made.session}/turns.json", headers=own)).status_code == 200


async def test_a_token_that_is_not_ascii_is_refused_like_any_wrong_one(made: Made) -> None:
    app = create_app(partial(read_state_runs, made.state), TOKEN)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inspect") as web:
        assert (await web.get("/?token=caf%C3%A9")).status_code == 401
        latin = {b"authorization": "Bearer caf\xe9".encode("latin-1")}
        assert (await web.get("/", headers=latin)).status_code == 401
        cookie = {b"cookie": f"{COOKIE}=caf\xe9".encode("latin-1")}
        assert (await web.get("/", headers=cookie)).status_code == 401


async def test_a_turn_number_too_long_to_read_is_404(web: httpx.AsyncClient, made: Made) -> None:
    for url in (
        f"/runs/{made.session}/turns/" + "9" * 5000,
        f"/runs/{made.session}/turns/" + "0" * 4999 + "1/request.json",
    ):
        response = await web.get(url)
        assert response.status_code == 404 and "content-security-policy" in response.headers


async def test_a_long_run_is_paged_and_its_charts_keep_their_size(tmp_path: Path) -> None:
    write_org(tmp_path / "org", identity_chars=200, purpose_chars=100)
    async with (
        daemon_in_process(tmp_path / "org", tmp_path / "state") as daemon,
        await daemon.client() as client,
    ):
        opened = await client.session_open("w0", "c0")
        for turn in range(205):
            await client.session_send(opened.session, f"turn {turn}")
    app = create_app(partial(read_state_runs, tmp_path / "state"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as web:
        first = await _page(web, f"/runs/{opened.session}")
        later = await _page(web, f"/runs/{opened.session}?page=1")
        live = (await web.get(f"/runs/{opened.session}/turns.json?after=0")).json()
    assert first.count("<tr data-turn=") == 200 and "page 1 of 2" in first
    assert later.count("<tr data-turn=") == 5 and 'rel="prev"' in later
    # A bar per turn would make a run of 100,000 turns a page of tens of MB.
    for chart in re.findall(r"<svg .*?</svg>", first, re.S):
        columns = set(re.findall(r'<rect class="bar[^"]*" x="([0-9.]+)"', chart))
        assert 100 <= len(columns) <= 200, len(columns)
    assert "cached share per 2 turns" in first and "tokens per 2 turns" in first
    # The run is open; only its last page takes its new turns, 200 at a time.
    assert "data-live" not in first and "data-live" in later
    assert [row["turn"] for row in live["turns"]] == list(range(1, 201))


def _inspect(*argv: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "rosterd.cli", "server", "inspect", *argv]
    return subprocess.Popen(command, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def served(made: Made) -> Iterator[str]:
    process = _inspect("--state", str(made.state), "--listen", "127.0.0.1:0")
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.search(r"inspector on (http://127\.0\.0\.1:\d+/)", line)
        assert match, line
        yield match[1]
    finally:
        process.terminate()
        process.communicate(timeout=10)


def _connect(served: str) -> socket.socket:
    host, port = httpx.URL(served).host, httpx.URL(served).port
    assert port is not None
    connection = socket.create_connection((host, port))
    connection.settimeout(60)
    return connection


def _status_line(connection: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\r\n"):
        got = connection.recv(1)
        if not got:
            break
        line += got
    return line


@pytest.mark.parametrize("head", [b"", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
def test_a_connection_that_sends_no_whole_request_is_closed(served: str, head: bytes) -> None:
    # Held open with nothing, or a trickle, it would keep one of the daemon's
    # descriptors for ever: a few thousand of them and no turn opens a file.
    with _connect(served) as idle:
        idle.sendall(head)
        assert idle.recv(1) == b""


def test_the_inspector_holds_so_many_connections_at_once(served: str) -> None:
    held = [_connect(served) for _ in range(MAX_CONNECTIONS)]
    try:
        with _connect(served) as extra:
            assert extra.recv(1) == b""  # closed as it came, not left to time out
        # Those it took are served still.
        held[-1].sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _status_line(held[-1]) == b"HTTP/1.1 200 OK\r\n"
    finally:
        for connection in held:
            connection.close()


async def test_roster_server_inspect_serves_the_state(served: str, made: Made) -> None:
    async with httpx.AsyncClient(base_url=served) as web:
        html = await _page(web, "/")
    assert made.session in html


def test_off_loopback_the_inspector_needs_a_token(made: Made, tmp_path: Path) -> None:
    refused = _inspect("--state", str(made.state), "--listen", "0.0.0.0:0")
    _, err = refused.communicate(timeout=30)
    assert refused.returncode != 0 and "not loopback" in err and "--token-file" in err
    short = tmp_path / "token"
    short.write_text("abc\n")
    refused = _inspect(
        "--state", str(made.state), "--listen", "0.0.0.0:0", "--token-file", str(short)
    )
    _, err = refused.communicate(timeout=30)
    assert refused.returncode != 0 and "16 characters" in err


_INSPECT = '[inspect]\nlisten = "127.0.0.1:0"'


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_the_daemon_serves_the_inspector_where_its_org_asks(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    inspect = f'{_INSPECT}\ntoken_file = "inspect.token"'
    write_org(tmp_path / "org", identity_chars=200, purpose_chars=100, sections=inspect)
    (tmp_path / "org" / "inspect.token").write_text(TOKEN + "\n")
    # Its own readers: the state directory, or a connection of its own.
    database = request.getfixturevalue("postgres_url") if backend == "postgres" else None
    async with (
        daemon_in_process(tmp_path / "org", tmp_path / "state", database=database) as daemon,
        await daemon.client() as client,
    ):
        opened = await client.session_open("w0", "c0")
        await client.session_send(opened.session, "hello")
        match = re.search(r"inspector on (http://127\.0\.0\.1:\d+)/", daemon.log())
        assert match, daemon.log()
        headers = {"authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=match[1], headers=headers) as web:
            html = await _page(web, f"/runs/{opened.session}")
            assert '<dt>status</dt><dd id="status">open</dd>' in html
            assert (await web.get("/", headers={"authorization": "Bearer no"})).status_code == 401


async def test_the_daemon_s_inspector_is_a_process_of_its_own(tmp_path: Path) -> None:
    write_org(tmp_path / "org", identity_chars=200, purpose_chars=100, sections=_INSPECT)
    daemon = DaemonProcess(tmp_path / "org", tmp_path / "state", env=SECRET_ENV).start()
    with daemon:
        assert daemon.process is not None
        inspector = only_child(daemon.process.pid)
        match = re.search(r"inspector on (http://127\.0\.0\.1:\d+)/", daemon.log())
        assert match, daemon.log()
        async with httpx.AsyncClient(base_url=match[1]) as web:
            assert (await web.get("/")).status_code == 200
        # Frozen in the middle of a page, as far as the daemon can tell:
        # no turn waits on it.
        with frozen(inspector):
            async with await RosterClient.connect(daemon.socket) as client:
                opened = await client.session_open("w0", "c0")
                assert (await client.session_send(opened.session, "hello")).turn == 1
        # It stops with a daemon that drains, and with one killed outright.
        with ending(inspector) as ended:
            assert daemon.stop() == 0
            assert ended()
        daemon.start()
        assert daemon.process is not None
        inspector = only_child(daemon.process.pid)
        with ending(inspector) as ended:
            daemon.kill9()
            assert ended(), "the inspector outlived a daemon killed with SIGKILL"
        # An inspector that dies is logged and started again; the daemon
        # serves on meanwhile.
        daemon.start()
        assert daemon.process is not None
        inspector = only_child(daemon.process.pid)
        os.kill(inspector, signal.SIGKILL)
        await daemon.logged("the inspector was stopped by SIGKILL")
        async with await RosterClient.connect(daemon.socket) as client:
            assert (await client.session_send(opened.session, "again")).turn == 2
        await daemon.logged("(started again)")
        (again,) = children(daemon.process.pid)
        assert again != inspector
        addresses = re.findall(r"inspector on (http://127\.0\.0\.1:\d+)/", daemon.log())
        async with httpx.AsyncClient(base_url=addresses[-1]) as web:
            assert (await web.get("/")).status_code == 200
        assert daemon.stop() == 0
    assert "Traceback" not in daemon.log()


def test_an_inspector_off_loopback_without_a_token_is_a_config_error(tmp_path: Path) -> None:
    inspect = '[inspect]\nlisten = "0.0.0.0:8377"'
    write_org(tmp_path, identity_chars=200, purpose_chars=100, sections=inspect)
    with pytest.raises(ConfigError) as refused:
        load_org(tmp_path)
    assert "token_file" in str(refused.value)


async def test_the_inspector_reads_a_postgresql_state_with_the_daemon_down(
    tmp_path: Path, postgres_url: str
) -> None:
    write_org(tmp_path / "org", identity_chars=200, purpose_chars=100)
    async with (
        daemon_in_process(tmp_path / "org", tmp_path / "sock", database=postgres_url) as daemon,
        await daemon.client() as client,
    ):
        opened = await client.session_open("w0", "c0")
        await client.session_send(opened.session, "hello <b>there</b>")
    app = create_app(partial(read_state_runs, postgres_url))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as web:
        assert opened.session in await _page(web, "/")
        turn = await _page(web, f"/runs/{opened.session}/turns/1")
    assert "hello &lt;b&gt;there&lt;/b&gt;" in turn
