"""The distribution name (issue 12 item 9): `envtool` on PyPI is an unrelated 2015 envdir tool, so
`pipx install envtool` installed the wrong program. envtool is distributed as `envtool-cuda`;
the command and the import package stay `envtool`, and README's user install says so."""

from __future__ import annotations

import re
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import tomllib
from conftest import REPO, build_envtool_wheel

DIST = "envtool-cuda"


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _section(heading: str) -> str:
    text = (REPO / "README.md").read_text()
    return text.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]


def test_the_distribution_is_envtool_cuda_and_the_command_stays_envtool() -> None:
    project = _pyproject()["project"]
    assert project["name"] == DIST  # not "envtool": that name on PyPI is another program
    assert project["scripts"] == {"envtool": "envtool.cli:main"}
    assert _pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["envtool"]


def test_readme_gives_a_user_install_of_that_name_and_a_developer_install_last() -> None:
    section = _section("Install")
    assert f"**`{DIST}`**" in section and "Do not `pipx install envtool`" in section
    assert "pipx install ." in section and "uv tool install ." in section
    assert "python3 -m venv" in section  # for machines with neither pipx nor uv
    # .ci/run runs this block verbatim: the developer install, with the docs tools the suite uses
    readme = (REPO / "README.md").read_text()
    develop = _section("Develop and test")
    assert readme.rstrip().endswith(develop.rstrip())  # the developers' section is the last
    block = develop.split("<!-- ci:install -->", 1)[1].split("```")[1].strip()
    assert block == "python3 -m venv .venv && .venv/bin/python -m pip install -e '.[test,docs]'"
    assert set(_pyproject()["project"]["optional-dependencies"]) >= {"test", "docs"}
    # the test extra's torch pin is the CUDA build on PyPI: README says how to get the CPU one
    assert "--index-url https://download.pytorch.org/whl/cpu" in develop
    assert re.search(r"torch==2\.13\.0`? on Linux x86_64 is the \*\*CUDA", develop)


@pytest.mark.slow
@pytest.mark.integration
def test_the_built_wheel_is_envtool_cuda_with_the_envtool_command(tmp_path: Path) -> None:
    """What pipx/uv install from a checkout: the wheel pip builds from it."""
    wheel = build_envtool_wheel(tmp_path)
    assert wheel.name.startswith("envtool_cuda-0.1.0-")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(f"{info}/METADATA").decode())
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    assert meta["Name"] == DIST
    assert re.search(r"^envtool = envtool\.cli:main$", entry_points, re.MULTILINE)
    assert "envtool/cli.py" in names and "envtool/_data/templates/ddp.py" in names
