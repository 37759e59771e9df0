"""Shared test helpers. Fixtures come from ../shared/fixtures (override: ENVTOOL_FIXTURES)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import channel_builder as cb
import pytest
from solve_scenarios import HARVESTED

REPO = Path(__file__).resolve().parent.parent
CONSOLE_SCRIPT = REPO / ".venv" / "bin" / "envtool"


def envtool_argv(script: bool = False) -> list[str]:
    """`python -m envtool` with this interpreter; `script`: the installed console script
    (.venv/bin/envtool, which proves the entry point works) where it exists."""
    if script and CONSOLE_SCRIPT.exists():
        return [str(CONSOLE_SCRIPT)]
    return [sys.executable, "-m", "envtool"]


def run_envtool(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    input: str | None = None,
    timeout: float = 300,
    script: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`envtool ARGS` as a subprocess, stdout and stderr captured as text (env None: this
    process's environment; cwd None: this process's folder)."""
    return subprocess.run(
        [*envtool_argv(script), *args],
        env=env,
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_envtool(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    stderr: int = subprocess.PIPE,
) -> subprocess.Popen[str]:
    """`envtool ARGS` left running, its stdout (and by default stderr) piped as text."""
    return subprocess.Popen(
        [*envtool_argv(), *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=stderr, text=True
    )


def fixtures_dir() -> Path:
    return Path(os.environ.get("ENVTOOL_FIXTURES", REPO.parent / "shared" / "fixtures"))


@pytest.fixture(scope="session")
def fixtures() -> Path:
    path = fixtures_dir()
    if not path.is_dir():
        pytest.skip(f"real-world fixtures not found at {path} (set ENVTOOL_FIXTURES)")
    return path


@pytest.fixture(scope="session")
def harvested(fixtures: Path) -> Path:
    """Real conda-forge, pytorch and nvidia repodata harvested from pixi locks (solve-only)."""
    return fixtures / HARVESTED


@pytest.fixture(scope="session")
def setup(tmp_path_factory: pytest.TempPathFactory) -> cb.CudaSetup:
    """A built CUDA-like channel, a wheel and a lock over both (channel_builder.cuda_setup)."""
    return cb.cuda_setup(tmp_path_factory.getbasetemp())


@pytest.fixture
def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """`envtool ARGS` in this process (in `cwd` when given) -> (exit code, stdout, stderr)."""
    from envtool.cli import main

    def run(args: list[str], cwd: Path | None = None) -> tuple[int, str, str]:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        with pytest.raises(SystemExit) as exc:
            main(args)
        out = capsys.readouterr()
        return int(exc.value.code or 0), out.out, out.err

    return run


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment for an `envtool` subprocess with its own envs dir and package cache, and a
    driver that runs CUDA 12.6 (the host probe override); no test pause hooks, no active env."""
    e = dict(os.environ)
    e.update(
        ENVTOOL_ENVS_DIR=str(tmp_path / "envs"),
        ENVTOOL_CACHE_DIR=str(tmp_path / "cache"),
        ENVTOOL_DRIVER_VERSION="570.86.10",
    )
    for var in ("ENVTOOL_TEST_PAUSE_AT", "ENVTOOL_TEST_PAUSE_S", "CONDA_PREFIX"):
        e.pop(var, None)
    return e
