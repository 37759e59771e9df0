"""Errors people can read (issue 12 item 7): the solver's explanation as the tree it is, a typo'd
command gets "did you mean", and --debug keeps the exit code of a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_envtool
from solve_scenarios import HARVESTED


@pytest.mark.integration
def test_solver_explanation_is_printed_as_its_tree(fixtures: Path, tmp_path: Path) -> None:
    # the default profile's torchvision has no build for the CUDA 11.8 torch of the harvested
    # conda-forge channel: rattler explains why as a tree
    channel = fixtures / HARVESTED / "conda-forge"
    proc = run_envtool(
        "create", "x", "--no-install", "--cuda", "11.8", "--driver", "580.65.06",
        "--channel", str(channel), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("envtool: error: "))
    assert lines[head].startswith(
        "envtool: error: no solution for linux-64: torchvision * cannot be installed because "
        "there are no viable options (why, below) — relax a pin"
    )
    tree = lines[head + 1 :]
    # one leading line, then rattler's tree as it is: its glyphs at the start of indented lines
    assert tree[0] == "  ├─ torchvision 0.22.0 would require"
    assert "  │  └─ cuda-version >=12.9,<13, for which no candidates were found." in tree
    assert tree[-1].startswith("     └─ ")
    assert all(line.startswith("  ") for line in tree)
    assert not any("…" in line for line in lines[head:])  # nothing cut
    assert not (tmp_path / "environments").exists()


@pytest.mark.parametrize(
    ("typo", "meant"), [("doctr", "doctor"), ("lst", "list"), ("instal", "install")]
)
def test_a_mistyped_command_gets_did_you_mean(typo: str, meant: str, run_cli) -> None:
    rc, _, err = run_cli([typo])
    assert rc == 2
    assert f"No such command '{typo}'. Did you mean '{meant}'?" in err


def test_an_unknown_command_without_a_near_name_is_only_unknown(run_cli) -> None:
    rc, _, err = run_cli(["zzzz"])
    assert rc == 2 and "No such command 'zzzz'." in err and "Did you mean" not in err


@pytest.mark.integration
def test_debug_shows_the_traceback_and_keeps_exit_code_2(tmp_path: Path) -> None:
    proc = run_envtool("--debug", "create", "x", "--cuda", "12.7", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" in proc.stderr and "--cuda 12.7: not a known CUDA version" in proc.stderr
    plain = run_envtool("create", "x", "--cuda", "12.7", cwd=tmp_path)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
