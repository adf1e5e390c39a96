"""The inspector in a real browser: Playwright driving the system Chromium.

Run by ``make test-browser``. ``ROSTER_CHROMIUM`` points at another
Chromium; ``ROSTER_SCREENSHOTS`` at a directory to keep the pages'
screenshots in (docs/images takes them from there).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from harness import daemon_in_process
from inspect_runs import HOSTILE, Made, make_runs
from playwright.async_api import Browser, Page, async_playwright, expect
from simulator import write_org

from rosterd.client import RosterClient

pytestmark = [pytest.mark.anyio, pytest.mark.browser]

# What a headless Chromium needs on a machine with no network beyond loopback.
_FLAGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str:
    found = os.environ.get("ROSTER_CHROMIUM") or shutil.which("chromium")
    if found is None:
        pytest.fail(
            "no Chromium for the browser tests: apt-get install chromium "
            "(or set ROSTER_CHROMIUM to a Chromium binary)",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    return anyio.run(make_runs, tmp_path_factory.mktemp("inspect"))


def _inspector(state: Path, *argv: str) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "rosterd.cli", "server", "inspect", *argv]
    process = subprocess.Popen(
        [*command, "--state", str(state), "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    match = re.search(r"inspector on (http://127\.0\.0\.1:\d+)/", line)
    assert match, line
    return process, match[1]


def _stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.communicate(timeout=10)


@pytest.fixture(scope="module")
def site(made: Made) -> Iterator[str]:
    process, url = _inspector(made.state)
    try:
        yield url
    finally:
        _stop(process)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=_chromium(), args=_FLAGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    opened = await browser.new_page(viewport={"width": 1280, "height": 900})
    # A dialog would be a script of the data's running: fail on the spot.
    opened.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    yield opened
    await opened.close()


async def _shot(page: Page, name: str, tmp_path: Path) -> None:
    where = anyio.Path(os.environ.get("ROSTER_SCREENSHOTS") or tmp_path)
    await where.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(where / f"{name}.png"), full_page=False)


async def test_a_run_and_a_turn_with_blocks_budgets_and_breakpoints(
    page: Page, site: str, made: Made, tmp_path: Path
) -> None:
    await page.goto(site + "/")
    await _shot(page, "inspect-runs", tmp_path)
    await page.click(f'a[href="/runs/{made.session}"]')
    await expect(page.locator("h1")).to_have_text(f"Run {made.session}")
    await expect(page.locator("svg")).to_have_count(2)
    await _shot(page, "inspect-run", tmp_path)
    await page.click(f'a[href="/runs/{made.session}/turns/2"]')
    await expect(page.locator("h2", has_text="Request 2 (tool step)")).to_be_visible()
    await page.click("details.system summary")
    breakpoints = page.locator("details.system p.breakpoint")
    await expect(breakpoints).to_have_count(3)
    await expect(breakpoints.first).to_contain_text("cache breakpoint: after connections")
    identity = page.locator("details.block", has=page.locator(".name", has_text="identity"))
    await expect(identity.first.locator("summary")).to_contain_text("/ 12000 characters")
    await expect(page.locator(".message.new").first).to_be_visible()
    await _shot(page, "inspect-turn", tmp_path)


async def test_a_miss_is_shown_side_by_side(
    page: Page, site: str, made: Made, tmp_path: Path
) -> None:
    await page.goto(f"{site}/runs/{made.changed}/turns/1")
    miss = page.locator("section.miss")
    await expect(miss.locator("h2")).to_have_text("Cache miss: block identity changed")
    before, after = miss.locator(".side.before pre"), miss.locator(".side.after pre")
    await expect(after).to_contain_text("Now also:")
    assert "Now also:" not in await before.inner_text()
    await miss.scroll_into_view_if_needed()
    await _shot(page, "inspect-miss", tmp_path)


async def test_hostile_text_shows_as_text_and_no_script_runs(
    page: Page, site: str, made: Made
) -> None:
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text))
    urls = [
        "/",
        f"/runs/{made.session}",
        f"/runs/{made.session}/turns/1",
        f"/runs/{made.session}/turns/2",
        f"/runs/{made.changed}/turns/1",
        "/search?q=pwned",
    ]
    for url in urls:
        await page.goto(site + url)
        assert await page.evaluate("typeof window.pwned") == "undefined", url
        # Our own script is the only one in the page, and it is from 'self'.
        sources = await page.eval_on_selector_all("script", "s => s.map(e => e.src)")
        assert sources == [f"{site}/static/inspect.js"], url
    await page.goto(f"{site}/runs/{made.session}/turns/1")
    await page.click("details.block:has(.name:text-is('memory')) summary")
    memory = page.locator("details.block:has(.name:text-is('memory')) pre")
    for text in HOSTILE[:6]:
        # JSON quotes it in the envelope, but every character shows as typed.
        await expect(memory).to_contain_text(text.replace('"', '\\"'))
    await expect(memory.locator(".ctl").first).to_have_text("U+202E")
    assert not [v for v in violations if "Content Security Policy" in v]


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[tuple[str, RosterClient, str]]:
    write_org(tmp_path / "org", workers=1, channels=1, identity_chars=300, purpose_chars=100)
    async with (
        daemon_in_process(tmp_path / "org", tmp_path / "state") as daemon,
        await daemon.client() as client,
    ):
        opened = await client.session_open("w0", "c0")
        await client.session_send(opened.session, "first")
        process, url = _inspector(tmp_path / "state")
        try:
            yield url, client, opened.session
        finally:
            _stop(process)


async def test_an_open_run_shows_a_new_turn_without_a_reload(
    page: Page, live: tuple[str, RosterClient, str]
) -> None:
    url, client, session = live
    await page.goto(f"{url}/runs/{session}")
    await expect(page.locator("tr[data-turn]")).to_have_count(1)
    loaded = await page.evaluate("performance.timeOrigin")
    await client.session_send(session, "second")
    # The polling script adds it within 2 s; the page was not reloaded.
    await expect(page.locator('tr[data-turn="2"]')).to_be_visible(timeout=2000)
    assert await page.evaluate("performance.timeOrigin") == loaded


async def test_the_token_link_followed_from_another_site_lets_its_reader_in(
    page: Page, made: Made, tmp_path: Path
) -> None:
    token = "s3cret-token-for-tests"
    (tmp_path / "token").write_text(token + "\n")
    process, url = _inspector(made.state, "--token-file", str(tmp_path / "token"))
    try:
        # A link in a chat or a mail: followed from a page of another site.
        await page.goto(f'data:text/html,<a href="{url}/?token={token}">the runs</a>')
        await page.click("a")
        await expect(page.locator("h1")).to_have_text("Runs")
        assert "token" not in page.url
        await page.reload()
        await expect(page.locator("h1")).to_have_text("Runs")
    finally:
        _stop(process)
