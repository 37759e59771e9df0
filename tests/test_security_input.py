"""Untrusted input (issue 10): env files, recordings, external programs, names and paths that
must end in one line and exit 2 (or a reported fact), never a hang, a traceback or runaway memory.

Each test here failed on the code before issue 10's fixes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from solve_scenarios import H200

# ----------------------------------------------------------------------------- env files


def _env_file_cases(tmp: Path) -> dict[str, Path]:
    """Hostile environment files: devices, FIFOs, alias bombs, huge files, deep nesting, huge
    versions. Each must be refused with one line naming it."""
    cases: dict[str, Path] = {"dev-zero": Path("/dev/zero")}
    fifo = tmp / "fifo.yml"
    os.mkfifo(fifo)
    cases["fifo"] = fifo
    laughs = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        laughs.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    laughs.append("dependencies: [*i]")
    (tmp / "laughs.yml").write_text("\n".join(laughs) + "\n")
    cases["billion-laughs"] = tmp / "laughs.yml"
    (tmp / "alias-small.yml").write_text("x: &p [python]\ndependencies: *p\n")
    cases["alias"] = tmp / "alias-small.yml"
    (tmp / "big.yml").write_text("dependencies:\n" + "  - numpy\n" * (5 * 1024 * 1024 // 10))
    cases["too-large"] = tmp / "big.yml"
    (tmp / "deep.yml").write_text("[" * 200_000 + "\n")
    cases["200k-nested-flow"] = tmp / "deep.yml"
    (tmp / "deep-ok.yml").write_text("dependencies: " + "[" * 100 + "]" * 100 + "\n")
    cases["100-nested-closed"] = tmp / "deep-ok.yml"
    (tmp / "dup.yml").write_text("dependencies: [python]\ndependencies: [numpy]\n")
    cases["duplicate-key"] = tmp / "dup.yml"
    (tmp / "ver5000.yml").write_text("dependencies:\n  - cuda-version=12." + "9" * 5000 + "\n")
    cases["5000-digit-cuda"] = tmp / "ver5000.yml"
    (tmp / "ver100.yml").write_text("dependencies:\n  - pytorch=2." + "9" * 100 + "\n")
    cases["100-digit-torch"] = tmp / "ver100.yml"
    (tmp / "pipver.yml").write_text("dependencies:\n  - pip:\n    - torch==2." + "9" * 5000 + "\n")
    cases["5000-digit-pip"] = tmp / "pipver.yml"
    (tmp / "pipver100.yml").write_text(
        "dependencies:\n  - pip:\n    - torch==2." + "9" * 100 + "\n"
    )
    cases["100-digit-pip"] = tmp / "pipver100.yml"
    (tmp / "longline.yml").write_text("dependencies:\n  - [" + "x" * 3_000_000 + "]\n")
    cases["3MB-value-echoed"] = tmp / "longline.yml"
    (tmp / "dir.yml").mkdir()
    cases["directory"] = tmp / "dir.yml"
    (tmp / "utf16.yml").write_bytes("dependencies: [python]\n".encode("utf-16"))
    cases["utf-16"] = tmp / "utf16.yml"
    return cases


ENV_FILE_CASES = [
    "dev-zero",
    "fifo",
    "billion-laughs",
    "alias",
    "too-large",
    "200k-nested-flow",
    "100-nested-closed",
    "duplicate-key",
    "5000-digit-cuda",
    "100-digit-torch",
    "5000-digit-pip",
    "100-digit-pip",
    "3MB-value-echoed",
    "directory",
    "utf-16",
]


def _one_line_error(code: int, out: str, err: str, name: str) -> None:
    assert code == 2, (code, out[-500:], err[-500:])
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("envtool: error:"), err[-500:]
    assert len(lines[0]) < 600, lines[0][:600]  # the value is cut, not echoed in full
    assert name in lines[0]


@pytest.mark.parametrize("case", ENV_FILE_CASES)
def test_inspect_refuses_a_hostile_env_file_in_one_line(case, run_cli, tmp_path) -> None:
    path = _env_file_cases(tmp_path)[case]
    code, out, err = run_cli(["inspect", str(path)], tmp_path)
    _one_line_error(code, out, err, path.name)


@pytest.mark.parametrize("case", ENV_FILE_CASES)
def test_create_f_refuses_a_hostile_env_file_in_one_line(case, run_cli, tmp_path) -> None:
    path = _env_file_cases(tmp_path)[case]
    args = ["create", "x", "--no-install", "--cuda", "12.6", "-f", str(path), *H200]
    code, out, err = run_cli(args, tmp_path)
    if case == "directory":  # click's own usage error for -f DIR (exit 2, no traceback)
        assert code == 2 and "is a directory" in err and "Traceback" not in err
    else:
        _one_line_error(code, out, err, path.name)
    assert not (tmp_path / "environments").exists()


def test_lock_refuses_a_fifo_environment_yml(run_cli, tmp_path) -> None:
    env_dir = tmp_path / "environments" / "x"
    env_dir.mkdir(parents=True)
    os.mkfifo(env_dir / "environment.yml")
    code, out, err = run_cli(["lock", "x"], tmp_path)
    _one_line_error(code, out, err, "environment.yml")


# ------------------------------------------------------------------- version limits in -f


@pytest.fixture(scope="module")
def conda_forge(harvested) -> str:
    return str(harvested / "conda-forge")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("pytorch>=2.8", "pytorch >=2.8"),  # the fixture channel has no 2.8 for CUDA 12.6
        ("pytorch<2", "pytorch <2"),
        ("cuda-version>=12.8", "cuda-version >=12.8"),
    ],
)
def test_a_version_limit_in_the_file_is_kept_in_the_solve(
    spec, why, conda_forge, run_cli, tmp_path
) -> None:
    """`create --cuda 12.6 -f` used to exit 0 with pytorch 2.7.1 locked, the limit dropped."""
    (tmp_path / "env.yml").write_text(f'name: x\ndependencies:\n  - python\n  - "{spec}"\n')
    args = ["create", "x", "--no-install", "--cuda", "12.6", "-f", "env.yml"]
    code, out, err = run_cli([*args, "--channel", conda_forge, *H200], tmp_path)
    assert code == 2, out
    assert "no solution for linux-64" in err and why in err
    assert "Traceback" not in err
    assert not (tmp_path / "environments" / "x" / "conda-lock.yml").exists()


@pytest.mark.integration
def test_a_satisfiable_limit_is_honoured_and_kept_for_relock(
    conda_forge, run_cli, tmp_path
) -> None:
    (tmp_path / "env.yml").write_text('name: x\ndependencies:\n  - python\n  - "pytorch<2.7"\n')
    args = ["create", "x", "--no-install", "--cuda", "12.6", "-f", "env.yml"]
    code, out, err = run_cli([*args, "--channel", conda_forge, *H200], tmp_path)
    assert code == 0, err
    lock = (tmp_path / "environments" / "x" / "conda-lock.yml").read_text()
    version = lock.split("- name: pytorch\n  version: ", 1)[1].split("\n", 1)[0]
    assert version.startswith(("2.5", "2.6")), version
    # the written request keeps the limit, so a re-lock solves the same request: up to date
    assert "pytorch<2.7" in (tmp_path / "environments" / "x" / "environment.yml").read_text()
    code, out, err = run_cli(["lock", "x", "--check"], tmp_path)
    assert code == 0, err


@pytest.mark.parametrize(
    "spec", ["pytorch=>>2", "numpy >>1", "pytorch >=2,<", "cuda-version ~=", "pytorch==2..1"]
)
def test_an_unparseable_spec_in_the_file_exits_2_naming_it(spec, run_cli, tmp_path) -> None:
    (tmp_path / "env.yml").write_text(f'name: x\ndependencies:\n  - python\n  - "{spec}"\n')
    args = ["create", "x", "--no-install", "--cuda", "12.6", "-f", "env.yml", *H200]
    code, out, err = run_cli(args, tmp_path)
    _one_line_error(code, out, err, "env.yml")
    assert repr(spec) in err
    assert not (tmp_path / "environments").exists()
