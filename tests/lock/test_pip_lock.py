"""The pip section: resolved offline by the real `uv pip compile` against wheels built here, locked as
`manager: pip` entries; anything that would replace the conda torch is refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from channel_builder import build_wheel

from envtool.adapters.install.uv_pip import compile_pip
from envtool.core.lockfile import SolvedPackage
from envtool.core.pip_lock import parse_pylock, python_platform
from envtool.errors import UsageError

CONDA = [
    SolvedPackage("python", "3.11.9", "h_0", "linux-64", "https://x/python.conda"),
    SolvedPackage("pytorch", "2.7.1", "cpu_mkl_0", "linux-64", "https://x/pytorch.conda"),
    SolvedPackage("numpy", "1.26.4", "py311_0", "linux-64", "https://x/numpy.conda"),
]


@pytest.fixture
def wheels(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    d = tmp_path / "wheels"
    d.mkdir()
    build_wheel(d, "tinyalpha", "1.0", ("tinybeta>=0.5",))
    build_wheel(d, "tinybeta", "0.4")
    build_wheel(d, "tinybeta", "0.6")
    build_wheel(d, "needstorch", "0.1", ("torch>=2",))
    build_wheel(d, "numpy", "2.0.0")
    build_wheel(d, "torch", "2.7.1")
    return d


def offline(wheels: Path) -> list[str]:
    return ["--no-index", f"--find-links {wheels}"]


@pytest.mark.integration
def test_pip_entries_resolve_with_urls_and_hashes(wheels) -> None:
    locked = compile_pip([*offline(wheels), "tinyalpha"], CONDA, "linux-64")
    by = {p.name: p for p in locked}
    assert set(by) == {"tinyalpha", "tinybeta"}
    assert by["tinybeta"].version == "0.6"  # newest that satisfies tinyalpha's >=0.5
    wheel = wheels / "tinyalpha-1.0-py3-none-any.whl"
    assert by["tinyalpha"].url == wheel.as_uri()
    assert by["tinyalpha"].sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()


@pytest.mark.integration
def test_pip_pin_is_honoured_and_conda_packages_stay_conda(wheels) -> None:
    locked = compile_pip([*offline(wheels), "tinybeta==0.4", "numpy"], CONDA, "linux-64")
    assert [(p.name, p.version) for p in locked] == [("tinybeta", "0.4")]


def test_pip_torch_next_to_conda_pytorch_is_refused(wheels) -> None:
    with pytest.raises(UsageError) as err:
        compile_pip([*offline(wheels), "torch==2.7.1"], CONDA, "linux-64")
    assert "would replace the conda torch build" in err.value.message


@pytest.mark.integration
def test_pip_package_that_pulls_torch_is_refused(wheels) -> None:
    with pytest.raises(UsageError) as err:
        compile_pip([*offline(wheels), "needstorch"], CONDA, "linux-64")
    assert "pulls torch" in err.value.message


@pytest.mark.integration
def test_pip_package_that_pulls_torch_is_refused_even_when_torch_is_not_on_the_index(
    wheels,
) -> None:
    (wheels / "torch-2.7.1-py3-none-any.whl").unlink()
    with pytest.raises(UsageError) as err:
        compile_pip([*offline(wheels), "needstorch"], CONDA, "linux-64")
    assert "pulls torch" in err.value.message


@pytest.mark.integration
def test_unresolvable_pip_entry_is_a_usage_error(wheels) -> None:
    with pytest.raises(UsageError) as err:
        compile_pip([*offline(wheels), "doesnotexist"], CONDA, "linux-64")
    assert "uv pip compile failed" in err.value.message


def test_python_platform_tags() -> None:
    assert python_platform("linux-64") == "x86_64-manylinux_2_28"
    assert python_platform("linux-aarch64", "2.17") == "aarch64-manylinux_2_17"
    assert python_platform("osx-arm64") == "aarch64-apple-darwin"


def test_parse_pylock_picks_the_platform_wheel() -> None:
    text = """
lock-version = "1.0"
[[packages]]
name = "numpy"
version = "2.0.0"
wheels = [
  { url = "https://f/numpy-2.0.0-cp311-cp311-macosx_14_0_arm64.whl", hashes = { sha256 = "aa" } },
  { url = "https://f/numpy-2.0.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", hashes = { sha256 = "bb" } },
]
"""
    (linux,) = parse_pylock(text, "linux-64")
    (mac,) = parse_pylock(text, "osx-arm64")
    assert linux.sha256 == "bb" and mac.sha256 == "aa"


@pytest.mark.integration
def test_create_locks_pip_section_as_pip_entries(harvested, wheels, run_cli, tmp_path) -> None:
    channel = harvested / "conda-forge"
    env = tmp_path / "environment.yml"
    env.write_text(
        yaml.safe_dump(
            {
                "name": "p",
                "dependencies": [
                    "python=3.11",
                    "pytorch",
                    "pip",
                    {"pip": [*offline(wheels), "tinyalpha"]},
                ],
            }
        )
    )
    rc, _, err = run_cli(
        ["create", "p", "--no-install", "--cuda", "cpu", "-f", str(env), "--channel", str(channel)],
        tmp_path,
    )
    assert rc == 0, err
    lock = yaml.safe_load((tmp_path / "environments" / "p" / "conda-lock.yml").read_text())
    pip = {p["name"]: p for p in lock["package"] if p["manager"] == "pip"}
    assert set(pip) == {"tinyalpha", "tinybeta"}
    assert (
        pip["tinyalpha"]["url"].startswith("file://")
        and len(pip["tinyalpha"]["hash"]["sha256"]) == 64
    )
    assert pip["tinyalpha"]["platform"] == "linux-64"
    written = (tmp_path / "environments" / "p" / "environment.yml").read_text()
    assert "tinyalpha" in written and "pip:" in written


@pytest.mark.integration
def test_offline_pip_compile_asks_no_index(wheels, monkeypatch) -> None:
    """`--offline` said "No network" but the pip section's `uv pip compile` still asked the
    index; now it runs with uv's --offline (its cache only) and says so when that is not enough."""
    monkeypatch.setenv("ENVTOOL_OFFLINE", "1")
    with pytest.raises(UsageError) as err:  # an index nothing answers: uv must not even try it
        compile_pip(["--index-url http://127.0.0.1:9/simple", "tinyalpha"], CONDA, "linux-64")
    assert "network was disabled" in err.value.message, err.value.message
    locked = compile_pip([*offline(wheels), "tinyalpha"], CONDA, "linux-64")  # local wheels: fine
    assert {p.name for p in locked} == {"tinyalpha", "tinybeta"}
