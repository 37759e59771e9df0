"""Issue 21's "done when": envtool installed non-editably into a venv of its own (as pipx does)
acts on the environment the user activated, not on its own interpreter, and says which and why.

The user's envs get torch 2.13 CPU without a download: a .pth line pointing at the test venv's
site-packages (a path line: its own .pth files, envtool's editable finder among them, are not run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPO, build_envtool_wheel, run_envtool

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEST_SITE = sysconfig.get_paths()["purelib"]  # the test venv's: torch, click, rattler…


def _venv(path: Path, *pth_dirs: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    site = subprocess.run(
        [
            str(path / "bin" / "python"),
            "-c",
            "import sysconfig;print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if pth_dirs:
        Path(site, "test_venv_site.pth").write_text("".join(d + "\n" for d in pth_dirs))
    return Path(site)


@pytest.fixture(scope="module")
def pipx_envtool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """envtool's console script from a wheel built from this checkout and installed (not
    editable) into a venv of its own; its dependencies come from the test venv by .pth."""
    root = tmp_path_factory.mktemp("pipx")
    wheels = root / "wheels"
    wheel = build_envtool_wheel(wheels)
    tool = root / "venvs" / "envtool-cuda"
    site = _venv(tool, TEST_SITE)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # pip --target writes no console script: the one pipx would link, by hand
    script = tool / "bin" / "envtool"
    script.write_text(f"#!{tool / 'bin' / 'python'}\nfrom envtool.cli import main\nmain()\n")
    script.chmod(0o755)
    where = subprocess.run(
        [str(tool / "bin" / "python"), "-c", "import envtool;print(envtool.__file__)"],
        cwd=root,  # not the checkout: `-c` puts the current folder first on sys.path
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(site)), where  # the wheel's copy, not this checkout
    return script


def _user_env(tmp_path: Path, conda: bool = False) -> Path:
    """The user's environment: a venv whose python imports torch; `conda`: a conda-style prefix
    (conda-meta/ with a history file) instead."""
    env = tmp_path / ("condaenv" if conda else ".venv")
    _venv(env, TEST_SITE)
    if conda:
        (env / "conda-meta").mkdir()
        (env / "conda-meta" / "history").write_text("==> 2026-12-01 00:00:00 <==\n")
    return env


def _activated(env: Path, var: str) -> dict[str, str]:
    """The shell after `source .venv/bin/activate` (VIRTUAL_ENV) or `conda activate`
    (CONDA_PREFIX): the variable set and the env's bin first on PATH."""
    e = {k: v for k, v in os.environ.items() if k not in ("CONDA_PREFIX", "VIRTUAL_ENV")}
    e[var] = str(env)
    e["PATH"] = f"{env / 'bin'}{os.pathsep}{e.get('PATH', '')}"
    return e


def _doctor(script: Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(script), "doctor", "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize("var", ["VIRTUAL_ENV", "CONDA_PREFIX"])
def test_a_pipx_installed_envtool_checks_the_activated_env(
    pipx_envtool: Path, tmp_path: Path, var: str
) -> None:
    user = _user_env(tmp_path, conda=var == "CONDA_PREFIX")
    proc = _doctor(pipx_envtool, _activated(user, var), tmp_path)
    kind = "conda env" if var == "CONDA_PREFIX" else "venv"
    line = f"envtool doctor: checking the active {kind} {user} (${var})"
    assert proc.stderr.splitlines()[0] == line, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["target"]["prefix"] == str(user) and report["target"]["variable"] == var
    assert report["target"]["line"] == line.removeprefix("envtool doctor: ")
    env = report["facts"]["env"]
    assert env["python_exe"] == str(user / "bin" / "python")
    assert env["torch"]["version"].startswith("2.13")  # found where the user has it
    assert "torch not importable" not in proc.stdout and proc.returncode == 0, proc.stdout[-1500:]


def test_with_nothing_active_it_checks_its_own_python_and_says_so(
    pipx_envtool: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CONDA_PREFIX", "VIRTUAL_ENV")}
    proc = _doctor(pipx_envtool, env, tmp_path)
    first = proc.stderr.splitlines()[0]
    assert first.startswith(
        f"envtool doctor: checking envtool's own python {pipx_envtool.parent / 'python'} "
        "(no conda env or venv is active"
    ), proc.stderr
    assert json.loads(proc.stdout)["target"]["source"] == "own"


def test_run_with_nothing_active_refuses_instead_of_changing_envtools_own_venv(
    pipx_envtool: Path, tmp_path: Path
) -> None:
    """`envtool run pip install X` with nothing active ran pip in envtool's own (pipx) venv,
    exit 0: the user's package went into envtool itself."""
    env = {k: v for k, v in os.environ.items() if k not in ("CONDA_PREFIX", "VIRTUAL_ENV")}
    own = pipx_envtool.parent.parent
    before = sorted(p.name for p in own.glob("lib/python*/site-packages/*"))
    argv = [str(pipx_envtool), "run", "pip", "install", "--no-index", "nothing-here"]
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "envtool: error: run: no environment is active and none was named — pass NAME (see "
        "`envtool list`) or --prefix PATH, or activate the environment: envtool run NAME -- CMD"
    ]
    assert sorted(p.name for p in own.glob("lib/python*/site-packages/*")) == before


def test_a_stale_activation_is_one_line_not_the_wrong_env(tmp_path: Path) -> None:
    env = _activated(tmp_path / "gone", "VIRTUAL_ENV")
    proc = run_envtool("doctor", "--fast", env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"envtool: error: $VIRTUAL_ENV={tmp_path / 'gone'}: no such directory (the active "
        "environment is gone) — deactivate it (`conda deactivate` / `deactivate`), "
        "or pass NAME / --prefix PATH"
    ]


def test_launch_and_run_use_the_activated_plain_venv(tmp_path: Path) -> None:
    """No conda-meta: `run` activates it as `source bin/activate` would, `launch` runs torchrun
    with its python (both said in one line)."""
    user = _user_env(tmp_path)
    env = _activated(user, "VIRTUAL_ENV")
    env.update(OMP_NUM_THREADS="1")
    code = "import sys, os; print(sys.prefix, os.environ['VIRTUAL_ENV'])"
    run = run_envtool("run", "--", "python", "-c", code, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(user), str(user)]
    assert run.stderr.splitlines() == [
        f"envtool run: running in the active venv {user} ($VIRTUAL_ENV)"
    ]
    # named by --prefix, a plain venv still runs
    by_prefix = run_envtool("run", "--prefix", str(user), "--", "python", "-c", code, cwd=tmp_path)
    assert by_prefix.returncode == 0 and by_prefix.stdout.split()[0] == str(user), by_prefix.stderr
    out = tmp_path / "out"
    script = REPO / "tests" / "scripts" / "rank_file.py"
    launch = run_envtool(
        "launch",
        str(script),
        "--cpu",
        "--nproc",
        "2",
        "--json",
        "--",
        str(out),
        "--env-var",
        "VIRTUAL_ENV",
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert launch.returncode == 0, launch.stderr[-2000:]
    assert f"envtool launch: launching in the active venv {user} ($VIRTUAL_ENV)" in launch.stderr
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        "rank-0": str(user),
        "rank-1": str(user),
    }
    manifest = json.loads(launch.stdout)["manifest"]
    assert manifest["python"] == str(user / "bin" / "python")
