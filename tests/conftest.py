"""Shared test helpers. Fixtures come from ../shared/fixtures (override: ENVTOOL_FIXTURES).

Tiers (pyproject declares the markers, README's Test section has the commands): `integration`
runs real external things (an envtool/torchrun/uv/slurm subprocess, a rattler solve or install, an
HTTP server, a network namespace), `slow` takes more than ~5 s alone, `gpu` needs an NVIDIA GPU;
every other test is `unit` (added below), so the tiers partition the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import channel_builder as cb
import pytest
from solve_scenarios import HARVESTED

if TYPE_CHECKING:
    from envtool.core.facts import EnvFacts, HostFacts

REPO = Path(__file__).resolve().parent.parent

# An envtool command with no NAME acts on the active conda env or venv (core/target.py): the
# suite's commands act on the test interpreter unless a test activates one itself, whatever shell
# (conda's auto-activated base, a venv) started pytest.
for _var in ("CONDA_PREFIX", "VIRTUAL_ENV"):
    os.environ.pop(_var, None)
CONSOLE_SCRIPT = REPO / ".venv" / "bin" / "envtool"
TIERS = ("integration", "slow", "gpu")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (README's test command): two workers per core. Much of the suite waits on
    subprocesses (torchrun ranks, Slurm, HTTP mirrors, time-outs), so one worker per core leaves
    cores idle: on 2 cores, 6 min 43 s with 2 workers, 5 min 27 s with 4 (docs/architecture.md)."""
    return 2 * (os.cpu_count() or 1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`unit`: every test marked none of integration/slow/gpu (in-process and fast)."""
    for item in items:
        if not any(item.get_closest_marker(tier) for tier in TIERS):
            item.add_marker(pytest.mark.unit)


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
        # what a run sets in os.environ (settings files, --offline) ends with it, as a process's
        # would: a test's `--offline` once made a later test in the same worker install offline
        before = dict(os.environ)
        try:
            with pytest.raises(SystemExit) as exc:
                main(args)
        finally:
            os.environ.clear()
            os.environ.update(before)
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
    for var in ("ENVTOOL_TEST_PAUSE_AT", "ENVTOOL_TEST_PAUSE_S", "CONDA_PREFIX", "VIRTUAL_ENV"):
        e.pop(var, None)
    return e


# ---------------------------------------------------------------- the 2 x H200 host, faked once

H200_CAPTURE = "h200-x2-host"


@dataclass(frozen=True)
class FakeHost:
    """A real host replayed from its capture folder (`nvidia-smi.txt`, `nvidia-smi-q.xml`,
    `query.csv`, `topo.txt` under the record's file names, and `collect_env.txt`): its host facts
    as envtool parses them, a `doctor --record` directory of it, or a fake `nvidia-smi` on PATH."""

    capture: Path
    SMI_FILES = ("nvidia-smi-q.xml", "nvidia-smi.txt", "query.csv", "topo.txt")

    def smi(self) -> dict[str, str]:
        """The raw nvidia-smi outputs by record file name."""
        return {name: (self.capture / name).read_text() for name in self.SMI_FILES}

    def facts(self, driver: str | None = None) -> HostFacts:
        """The HostFacts `doctor --replay` makes of the capture (a new object each call);
        `driver`: as replayed with `--driver DRIVER`."""
        from envtool.core.host_record import apply_overrides, facts_from_record

        facts = facts_from_record(self.smi())
        return apply_overrides(facts, driver=driver) if driver else facts

    def env_facts(self) -> EnvFacts:
        """The EnvFacts of its collect_env.txt (torch 2.11.0+cu130, CUDA available, 2 devices)."""
        from envtool.core.collect_env import parse_collect_env

        return parse_collect_env((self.capture / "collect_env.txt").read_text())

    def record(self, directory: Path, env: EnvFacts | None = None) -> Path:
        """A `doctor --record` directory: the nvidia-smi outputs under host/, `env` (default: the
        collect_env facts) as env.json."""
        import json

        (directory / "host").mkdir(parents=True)
        for name, text in self.smi().items():
            (directory / "host" / name).write_text(text)
        facts = env if env is not None else self.env_facts()
        (directory / "env.json").write_text(json.dumps(facts.to_dict()))
        return directory

    def nvidia_smi_bin(self, bin_dir: Path) -> Path:
        """`bin_dir` holding an executable `nvidia-smi` that prints the captured outputs (`-q -x`,
        `--query-gpu…`, `topo -m`, else the table); put it first on PATH."""
        bin_dir.mkdir(parents=True, exist_ok=True)
        smi = bin_dir / "nvidia-smi"
        smi.write_text(
            "#!/bin/sh\n"
            'case "$*" in\n'
            f'  "-q -x") exec cat "{self.capture}/nvidia-smi-q.xml" ;;\n'
            f'  --query-gpu*) exec cat "{self.capture}/query.csv" ;;\n'
            f'  "topo -m") exec cat "{self.capture}/topo.txt" ;;\n'
            f'  *) exec cat "{self.capture}/nvidia-smi.txt" ;;\n'
            "esac\n"
        )
        smi.chmod(0o755)
        return bin_dir


@pytest.fixture(scope="session")
def fake_h200(fixtures: Path) -> FakeHost:
    """The 2 x H200 (NVLink) host of fixtures/h200-x2-host: driver 580.159.04 (CUDA 13.0), torch
    2.11.0+cu130. Tests that need "a real GPU host" use this one fake."""
    return FakeHost(fixtures / H200_CAPTURE)


def build_envtool_wheel(dest: Path) -> Path:
    """The wheel pip builds from this checkout (what pipx/uv install); skips when the build
    backend cannot be fetched here."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dest), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 and "hatchling" in proc.stderr:
        pytest.skip(f"the build backend (hatchling) is not reachable here: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = dest.glob("*.whl")
    return wheel
