"""Everything a public module promises in ``__all__`` exists."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "rosterd",
    "rosterd.org",
    "rosterd.stores",
    "rosterd.stores.files",
    "rosterd.stores.postgres",
    "rosterd.compiler",
    "rosterd.engines",
    "rosterd.runtime",
    "rosterd.protocol",
    "rosterd.daemon",
    "rosterd.client",
    "rosterd.cli",
    "rosterd.inspect",
    "rosterd.bridge",
    "rosterd.pricing",
    "rosterd.observe",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    assert isinstance(module.__all__, tuple)
    missing = [attr for attr in module.__all__ if not hasattr(module, attr)]
    assert missing == []
