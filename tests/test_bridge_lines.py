"""What the IRC bridge reads and writes as text: attention, cleaning, fitting."""

from __future__ import annotations

import logging
import re

import pytest
from harness import ManualClock
from hypothesis import given
from hypothesis import strategies as st

from rosterd.bridge import IrcLink, addressed, clean, reply_lines


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ada: are you there?", True),
        ("ADA, a question", True),
        ("thanks @ada!", True),
        ("@Ada", True),
        ("adam: not you", False),
        ("ada is quiet today", False),
        ("mail me at x@ada.example", False),
        ("@adalovelace hi", False),
        ("", False),
    ],
)
def test_who_is_addressed(text: str, expected: bool) -> None:
    assert addressed(text, "ada") is expected


def test_formatting_and_controls_are_stripped() -> None:
    assert clean("\x02bold\x02 \x0304,01red\x03 \x1funder\x1f\x0f\x00\x07 x") == "bold red under x"
    assert clean("\x0412ab34colour") == "colour"
    assert clean("  \x16  ") == ""
    # A bare CR or LF within a line, DEL and C1 controls (CSI, NEL) too.
    assert clean("a\rb\nc\x7fd\x9b2Ke\x85f\tg") == "abcd2Kef\tg"


@given(st.text(max_size=3000), st.integers(min_value=20, max_value=450))
def test_every_line_fits_and_nothing_but_whitespace_is_lost(text: str, budget: int) -> None:
    lines = reply_lines(text, budget, 1 << 30, "")
    for line in lines:
        assert 0 < len(line.encode()) <= budget
        assert not any(c in line for c in "\r\n\x00\u2028\u2029\x85")
        assert not any(ord(c) < 32 or c == "\x7f" for c in line)
    # Controls and line ends become breaks; every other character is kept.
    flattened = re.sub("[\x00-\x1f\x7f\x85\u2028\u2029]", " ", text)
    assert "".join("".join(lines).split()) == "".join(flattened.split())


def test_whitespace_longer_than_a_line_makes_no_empty_line() -> None:
    assert reply_lines(" " * 600 + "x", 450, 100, "") == ["x"]
    assert reply_lines("a" + " " * 900 + "b", 450, 100, "") == ["a", "b"]


def test_past_max_lines_the_last_says_where_the_rest_is() -> None:
    lines = reply_lines("\n".join(f"line {n}" for n in range(9)), 100, 3, "more: runs show r-1")
    assert lines == ["line 0", "line 1", "more: runs show r-1"]
    assert reply_lines("one\ntwo\nthree", 100, 3, "more") == ["one", "two", "three"]


def test_a_word_longer_than_a_line_is_cut_between_characters() -> None:
    lines = reply_lines("日本語" * 100, 31, 100, "")
    assert all(len(line.encode()) <= 31 for line in lines)
    assert "".join(lines) == "日本語" * 100


@pytest.mark.anyio
async def test_lines_dropped_from_a_full_outbox_are_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No server there: everything said waits in the outbox.
    async with IrcLink("127.0.0.1", 1, "ada", ["#ops"], clock=ManualClock()) as link:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rosterd.bridge"):
            for n in range(510):
                link.say("#ops", f"line {n}")
    dropped = [r.getMessage() for r in caplog.records if "said" in r.getMessage()]
    assert dropped == ["500 lines wait to be said: the oldest are dropped"]
