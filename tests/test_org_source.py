"""``OrgSource``: the org in force, swapped whole on reload, kept on a broken edit."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from harness import ManualClock, copy_org

from rosterd import ConfigError
from rosterd.org import Org, OrgSource

pytestmark = pytest.mark.anyio


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


async def test_a_reload_swaps_in_a_new_snapshot_and_leaves_the_old_one_as_it_was(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    org_dir = copy_org(tmp_path / "org")
    source = await OrgSource.load(org_dir, clock)
    before = source.current()
    assert (source.generation, source.loaded_at, source.error) == (1, clock(), None)
    assert not await source.changed()

    _edit(org_dir / "org.toml", "total = 48000", "total = 40000")
    clock.advance(5)
    assert await source.changed()
    after = await source.reload()

    assert after is not None and after is source.current()
    assert after.context.total == 40000
    assert before.context.total == 48000  # a session holding the old one keeps it
    assert (source.generation, source.loaded_at) == (2, clock())
    assert not await source.changed()


async def test_a_broken_edit_keeps_the_snapshot_in_force_and_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    org_dir = copy_org(tmp_path / "org")
    source = await OrgSource.load(org_dir)
    good = source.current()
    _edit(org_dir / "org.toml", "[workers.grace]", "[workers.grace")

    with caplog.at_level(logging.ERROR, logger="rosterd.config"):
        assert await source.reload() is None
        assert await source.reload() is None
    assert source.current() is good
    assert source.generation == 1
    assert source.error is not None and "org.toml" in source.error
    assert len([r for r in caplog.records if "org edit rejected" in r.message]) == 1
    # The broken files were read: until they change again there is nothing to reload.
    assert not await source.changed()

    _edit(org_dir / "org.toml", "[workers.grace", "[workers.grace]")
    assert await source.changed()
    assert await source.reload() is not None
    assert source.error is None
    assert source.generation == 2


async def test_an_identity_edit_is_a_change(tmp_path: Path) -> None:
    org_dir = copy_org(tmp_path / "org")
    source = await OrgSource.load(org_dir)
    identity = next((org_dir / "workers").glob("*/identity.md"))
    identity.write_text(identity.read_text() + "\nOne more line, and a longer file.\n")
    assert await source.changed()


async def test_a_file_saved_over_with_the_same_size_and_time_is_a_change(tmp_path: Path) -> None:
    org_dir = copy_org(tmp_path / "org")
    source = await OrgSource.load(org_dir)
    # As editors save: a new file renamed over the old one. Within one tick
    # of the file system's clock it has the old one's time, set here.
    toml = org_dir / "org.toml"
    saved = org_dir / ".org.toml.new"
    saved.write_text(toml.read_text().replace("total = 48000", "total = 40000"))
    os.utime(saved, ns=(toml.stat().st_atime_ns, toml.stat().st_mtime_ns))
    os.replace(saved, toml)
    assert await source.changed()


async def test_an_org_that_does_not_load_has_no_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        await OrgSource.load(tmp_path / "missing")


async def test_the_file_a_broken_edit_lacks_is_watched_until_it_comes(tmp_path: Path) -> None:
    org_dir = copy_org(tmp_path / "org")
    source = await OrgSource.load(org_dir)
    _edit(org_dir / "org.toml", "[workers.grace]", "[workers.grace]\n[workers.bob]")
    assert await source.reload() is None
    assert source.error is not None and "bob" in source.error
    assert not await source.changed()

    # Not a file of the org in force, but the one the edit was missing.
    (org_dir / "workers" / "bob").mkdir()
    (org_dir / "workers" / "bob" / "identity.md").write_text("You are Bob.\n")
    assert await source.changed()
    fixed = await source.reload()
    assert fixed is not None and source.error is None
    assert fixed.identities["bob"] == "You are Bob.\n"


async def _reload_with_an_edit_after_the_read(
    source: OrgSource, edit: Callable[[], None]
) -> Org | None:
    """``source.reload()``, with *edit* made once the loader has read the
    files and before the reload does anything more off the loop.

    The reload reads the files in a worker thread. With one thread token,
    held here while the reload queues for it, the token goes to the reload
    for its read and, once the read is over, straight back to this task
    (anyio hands a freed token to the first in line): the edit lands after
    the read, before the reload's next thread call."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    limiter.total_tokens = 1
    reloaded: list[Org | None] = []

    async def reload() -> None:
        reloaded.append(await source.reload())

    async with anyio.create_task_group() as tg:
        await limiter.acquire()
        tg.start_soon(reload)
        await anyio.wait_all_tasks_blocked()  # the reload waits for the token
        limiter.release()
        await limiter.acquire()  # back once the read is over
        edit()
        limiter.release()
    return reloaded[0]


@pytest.mark.parametrize(
    ("first", "then", "read", "final"),
    [
        (("total = 48000", "total = 40000"), ("total = 40000", "total = 100000"), 40000, 100000),
        # The fix of a broken org: without a reload the daemon would report
        # the error, and keep the old org, until another edit.
        (("[workers.grace]", "[workers.grace"), ("[workers.grace", "[workers.grace]"), None, 48000),
    ],
    ids=["edit", "fix"],
)
async def test_an_edit_landing_just_after_a_reload_read_the_files_is_a_change(
    tmp_path: Path, first: tuple[str, str], then: tuple[str, str], read: int | None, final: int
) -> None:
    org_dir = copy_org(tmp_path / "org")
    source = await OrgSource.load(org_dir)
    toml = org_dir / "org.toml"
    _edit(toml, *first)

    reloaded = await _reload_with_an_edit_after_the_read(source, lambda: _edit(toml, *then))
    assert (reloaded.context.total if reloaded is not None else None) == read
    assert (source.error is None) == (reloaded is not None)
    # What was read is not what is on disk: the next check must say so. (An
    # edit of the same size within one tick of the file system's clock
    # would leave the stamp as it was.)
    assert await source.changed()
    assert await source.changed("ada", "general")
    reread = await source.reload()
    assert reread is not None and reread.context.total == final
    assert source.error is None
