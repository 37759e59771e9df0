"""YAML that parses but that Python cannot type: a 5,000-digit integer (int() refuses more than
4,300 digits with a ValueError) and a list used as a mapping key (unhashable). Every command that
reads YAML answers with one line naming the file, exit 2 — no traceback: inspect, create -f,
install/export --lock, and a variant index (variants.yml) read by install, lock --check and
bundle (its dry run too)."""

from __future__ import annotations

from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool

from envtool.core.safe_load import parse_yaml
from envtool.errors import UsageError

BIG = "7" * 5000
HOSTILE = {
    "big-int": (f"x: {BIG}\n", "an integer of 5000 digits"),
    "list-key": ("? [a, b]\n: 1\n", "a list or mapping used as a key"),
    "map-key": ("? {a: 1}\n: 1\n", "a list or mapping used as a key"),
}


def one_line_exit_2(r, path: Path, reason: str) -> None:  # type: ignore[no-untyped-def]
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("envtool: error: ") and str(path.name) in line and reason in line, line


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_one_loader_refuses_them_in_one_line(case: str) -> None:
    text, reason = HOSTILE[case]
    with pytest.raises(UsageError) as err:
        parse_yaml(text, "f.yml")
    assert reason in err.value.message and "(line 1)" in err.value.message
    assert parse_yaml("x: 12345678901234567890\n", "f.yml") == {"x": 12345678901234567890}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_inspect_and_create_f_refuse_an_environment_file(
    case: str, tmp_path: Path, env: dict[str, str]
) -> None:
    text, reason = HOSTILE[case]
    yml = tmp_path / "environment.yml"
    yml.write_text("name: x\nchannels: [conda-forge]\ndependencies:\n  - python\n" + text)
    one_line_exit_2(run_envtool("inspect", str(yml), env=env, cwd=tmp_path), yml, reason)
    r = run_envtool("create", "x", "-f", str(yml), "--cuda", "cpu", env=env, cwd=tmp_path)
    one_line_exit_2(r, yml, reason)
    assert not (tmp_path / "envs" / "x").exists() and not (tmp_path / "environments").exists()


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_install_and_export_refuse_a_lock(case: str, tmp_path: Path, env: dict[str, str]) -> None:
    text, reason = HOSTILE[case]
    lock = tmp_path / "conda-lock.yml"
    lock.write_text("version: 1\nmetadata: {}\npackage: []\n" + text)
    r = run_envtool("install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), env=env)
    one_line_exit_2(r, lock, reason)
    assert not (tmp_path / "p").exists()
    one_line_exit_2(run_envtool("export", "--lock", str(lock), env=env), lock, reason)


@pytest.fixture(scope="module")
def variant_project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A project locked with variants cpu and cuda12.6 over a built channel."""
    import os

    root = tmp_path_factory.mktemp("yamlvariants")
    channel = cb.build_channel(root / "channel", cb.cuda_graph())
    env = {
        **os.environ,
        "ENVTOOL_ENVS_DIR": str(root / "envs"),
        "ENVTOOL_CACHE_DIR": str(root / "cache"),
        "ENVTOOL_DRIVER_VERSION": "570.86.10",
    }
    env.pop("CONDA_PREFIX", None)
    env_dir = root / "environments" / "demo"
    env_dir.mkdir(parents=True)
    (env_dir / "environment.yml").write_text(
        f"name: demo\nchannels:\n  - {channel}\ndependencies:\n  - python\n  - pytorch\n"
    )
    r = run_envtool("lock", "demo", "--variants", "cpu,cuda12.6", env=env, cwd=root)
    assert r.returncode == 0, r.stderr
    return root, env


@pytest.mark.integration
@pytest.mark.parametrize("value", [BIG, "[535, 1]", "{a: 1}", "'" + BIG + "'"])
def test_a_variant_index_with_a_hostile_min_driver(
    variant_project: tuple[Path, dict[str, str]], value: str
) -> None:
    """min_driver as a 5,000-digit number (or text), a list, a mapping: install, lock --check,
    bundle and its dry run all say so in one line (the index is restored afterwards)."""
    root, env = variant_project
    index = root / "environments" / "demo" / "variants.yml"
    original = index.read_text()
    assert "min_driver: 560.28.03" in original
    index.write_text(original.replace("min_driver: 560.28.03", f"min_driver: {value}"))
    try:
        for args in (
            ["install", "demo", "--dry-run"],
            ["lock", "demo", "--check"],
            ["bundle", "demo", "-o", str(root / "bundle"), "--dry-run"],
            ["bundle", "demo", "-o", str(root / "bundle")],
        ):
            r = run_envtool(*args, env=env, cwd=root)
            one_line_exit_2(r, index, "variants.yml")
        assert not (root / "bundle").exists()
    finally:
        index.write_text(original)
    assert run_envtool("lock", "demo", "--check", env=env, cwd=root).returncode == 0


@pytest.mark.integration
def test_a_settings_file_with_a_5000_digit_number_is_one_line(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The same limit in TOML (tomllib raises a plain ValueError, not TOMLDecodeError): the
    user's settings file is read by every command, which all ended in a traceback."""
    config = tmp_path / "cfg" / "envtool" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"x = {BIG}\n")
    r = run_envtool("list", env={**env, "XDG_CONFIG_HOME": str(tmp_path / "cfg")}, cwd=tmp_path)
    one_line_exit_2(r, config, "not valid TOML")
