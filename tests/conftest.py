"""Shared fixtures: the anyio backend and paths to the example org."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_ORG = REPO / "examples" / "org"


@pytest.fixture
def anyio_backend() -> str:
    # aiofiles runs on asyncio's executor, so the daemon and tests use asyncio.
    return "asyncio"


@pytest.fixture
def example_org() -> Path:
    return EXAMPLE_ORG
