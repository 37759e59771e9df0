"""conda-lock.yml is written by conda-lock's own writer; envtool only has it emit through libyaml.

conda-lock calls `yaml.dump` with PyYAML's pure-Python emitter, about three quarters of `envtool
lock` at 1000 packages (docs/benchmarks-scaling.md). libyaml's emitter is several times faster;
these tests hold it to writing exactly the bytes conda-lock's pure writer writes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from solve_scenarios import scenarios

from envtool.adapters.lockfile.lock_io import load_yaml

pytestmark = pytest.mark.skipif(
    not hasattr(yaml, "CDumper"), reason="PyYAML built without libyaml: the pure emitter is used"
)


@pytest.mark.slow
def test_libyaml_emits_the_same_bytes_as_pyyaml_on_real_locks(fixtures: Path) -> None:
    locks = sorted((fixtures / "locks").glob("*conda-lock*.yml"))
    assert len(locks) >= 4
    for path in locks:
        data = load_yaml(path.read_bytes())
        pure = yaml.dump(data, sort_keys=False)
        assert yaml.dump(data, sort_keys=False, Dumper=yaml.CDumper) == pure, path.name


@pytest.mark.integration
@pytest.mark.parametrize("scenario", ["conda-forge-cuda12.6", "legacy-pytorch-cuda12.1"])
def test_envtool_writes_the_bytes_of_conda_locks_pure_writer(
    harvested: Path, run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    """A real solve locked twice: with libyaml, and with PyYAML's own emitter (what conda-lock
    does unaided, as on a PyYAML without libyaml)."""
    args = ["--platform", "linux-64", "--platform", "osx-arm64", *scenarios(harvested)[scenario]]
    dump = yaml.dump
    fast, pure = tmp_path / "fast", tmp_path / "pure"
    for where in (fast, pure):
        where.mkdir()
    assert run_cli(["create", "w", "--no-install", *args], fast)[0] == 0
    monkeypatch.delattr(yaml, "CDumper")
    assert run_cli(["create", "w", "--no-install", *args], pure)[0] == 0
    lock = Path("environments") / "w" / "conda-lock.yml"
    assert (fast / lock).read_bytes() == (pure / lock).read_bytes()
    assert yaml.dump is dump  # the swap is undone after writing


def test_a_document_with_non_ascii_text_is_left_to_conda_locks_own_emitter() -> None:
    """libyaml folds long escaped non-ASCII scalars elsewhere than PyYAML does: a lock naming
    /home/josé/… would differ by machine (PyYAML with or without libyaml), so it is not swapped."""
    from envtool.adapters.lockfile.lock_io import _libyaml_emitter

    path = "/home/jos\u00e9/" + "projekt-\u00fcbersicht/" * 8 + "environment.yml"
    doc = {"metadata": {"sources": [path]}, "package": [{"name": "x", "version": "1"}]}
    pure = yaml.dump(doc, sort_keys=False)
    assert yaml.dump(doc, sort_keys=False, Dumper=yaml.CDumper) != pure  # why the guard exists
    with _libyaml_emitter():
        assert yaml.dump(doc, sort_keys=False) == pure
