"""Shared test helpers. Fixtures come from ../shared/fixtures (override: ENVTOOL_FIXTURES)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import channel_builder as cb
import pytest
from solve_scenarios import HARVESTED

REPO = Path(__file__).resolve().parent.parent


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
