"""What gets deployed is the wheel (docs/operations.md, Install from a wheel).

It is built from a copy of the sources, installed into a fresh venv with no
checkout on its path, and must run there: ``roster --version`` and
``roster check --org examples/org``. Dependencies come from PyPI through
pip's cache.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from harness import REPO

import rosterd
from rosterd.cli import main

_NOT_SOURCES = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".state",
    ".hypothesis",
    "build",
    "dist",
    "*.egg-info",
    "*_cache",
    "__pycache__",
)


def _run(*argv: str | Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


# The tests of the wheel run on one xdist worker, so it is built once.
@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    # A copy, so no build/ left over from an earlier build can slip into the wheel.
    shutil.copytree(REPO, root / "src", ignore=_NOT_SOURCES)
    _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
        "--disable-pip-version-check", "--wheel-dir", root / "dist", root / "src",
        cwd=root,
    )  # fmt: skip
    (built,) = (root / "dist").glob("rosterd-*-py3-none-any.whl")
    return built


@pytest.mark.long
@pytest.mark.xdist_group("wheel")
@pytest.mark.timeout(300)
def test_the_wheel_holds_every_file_of_the_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        packaged = {name for name in archive.namelist() if name.startswith("rosterd/")}
    sources = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "rosterd").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert packaged == sources


@pytest.mark.long
@pytest.mark.xdist_group("wheel")
@pytest.mark.timeout(300)
def test_the_wheel_installed_in_a_fresh_venv_runs(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    _run(
        sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
        "--disable-pip-version-check", wheel,
        cwd=tmp_path,
    )  # fmt: skip
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    roster = venv / "bin" / "roster"

    assert _run(roster, "--version", cwd=tmp_path) == f"roster {rosterd.__version__}\n"
    report = _run(roster, "check", "--org", "examples/org", cwd=tmp_path)
    assert report.splitlines()[-1] == "ok: every compilation fits its budgets"
    imported = _run(python, "-c", "import rosterd; print(rosterd.__file__)", cwd=tmp_path)
    assert Path(imported.strip()).is_relative_to(venv)


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"roster {importlib.metadata.version('rosterd')}\n"


def test_version_run_from_a_source_tree_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    # What importlib.metadata answers when rosterd is imported from a checkout.
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"roster {rosterd.__version__} (not installed)\n"


def test_the_package_and_its_metadata_agree_on_the_version() -> None:
    # daemon.status reports rosterd.__version__, roster --version the metadata.
    assert importlib.metadata.version("rosterd") == rosterd.__version__
