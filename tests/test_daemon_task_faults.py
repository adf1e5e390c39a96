"""One task's filesystem failure fails that task alone; the daemon goes on.

The fault is real: the state directory's ``runs`` becomes a plain file, so
creating the run directory fails with ENOTDIR, which root cannot bypass as it
would a permission bit.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest
from harness import InProcessDaemon, wait_task

from rosterd.client import RpcError

pytestmark = pytest.mark.anyio


def break_runs(state: Path) -> Path:
    runs = state / "runs"
    if runs.exists():
        runs.rename(state / "runs.saved")
    else:
        (state / "runs.saved").mkdir()
    runs.write_text("not a directory\n")
    return runs


def mend_runs(state: Path) -> None:
    (state / "runs").unlink()
    (state / "runs.saved").rename(state / "runs")


async def test_a_task_whose_run_directory_cannot_be_made_fails_alone(
    served: InProcessDaemon,
) -> None:
    async with await served.client() as client:
        await client.daemon_status()
        runs = break_runs(served.state)
        task = await client.task_submit("ada", "releases", "draft notes")
        failed = await wait_task(client, task.id, "failed", "done")
        status = await client.daemon_status()
        mend_runs(served.state)
        after = await client.task_submit("ada", "releases", "next one")
        done = await wait_task(client, after.id, "done", "failed")
    assert failed.status == "failed"
    assert str(runs) in (failed.error or "")
    assert "Not a directory" in (failed.error or "")
    assert status.pid > 0
    assert done.status == "done"
    assert "You said: next one" in (done.reply or "")
    log = served.log()
    assert re.search(rf"task {task.id} run t-\S+ failed: .*Not a directory", log)


async def test_a_direct_run_that_cannot_be_stored_is_a_storage_error(
    served: InProcessDaemon,
) -> None:
    async with await served.client() as client:
        await client.daemon_status()
        break_runs(served.state)
        with pytest.raises(RpcError) as failure:
            await client.run_direct("ada", "hi")
        mend_runs(served.state)
        result = await client.run_direct("ada", "hi again")
    assert failure.value.code == 1008
    assert failure.value.data["errno"] == errno.ENOTDIR
    assert "You said: hi again" in result.text
