"""`envtool export NAME --format pixi`: a pixi.toml that tomllib reads back exactly, whose
environments ask for what envtool locked — checked by solving each pixi environment's
dependencies with rattler over the same channel, with the CUDA its rich platform declares."""

from __future__ import annotations

from pathlib import Path

import channel_builder as cb
import pytest
import tomllib
from conftest import run_envtool

from envtool.core.pixi import plan_pixi_variant, render_pixi_toml, toml_string
from envtool.core.spec import parse_conda_spec

pytestmark = pytest.mark.integration


def _as_spec(name: str, value: object) -> str:
    """A pixi dependency (string or {version, build}) as the MatchSpec pixi solves it as."""
    if isinstance(value, dict):
        return f"{name} {value.get('version', '*')} {value.get('build', '*')}"
    return f"{name} {value}"


def test_variants_become_features_environments_and_rich_cuda_platforms(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "environment.yml").write_text(
        f"name: demo\nchannels:\n  - {setup.channel.as_uri()}\n"
        "dependencies:\n  - python\n  - pytorch=2.7\n"
    )
    made = run_envtool(
        "create", "demo", "-f", "environment.yml", "--channel", str(setup.channel),
        "--cuda", "12.6", "--driver", "570.86.10", "--no-install", env=env, cwd=root,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    (root / "environments" / "demo" / "conda-lock.yml").unlink()  # variants only
    locked = run_envtool("lock", "demo", "--variants", "cpu,cuda12.6", env=env, cwd=root)
    assert locked.returncode == 0, locked.stderr
    out = run_envtool("export", "demo", "--format", "pixi", "-o", "pixi.toml", env=env, cwd=root)
    assert out.returncode == 0, out.stderr
    manifest = tomllib.loads((root / "pixi.toml").read_text())

    ws = manifest["workspace"]
    assert ws["channels"] == [setup.channel.as_uri()] and ws["requires-pixi"] == ">=0.71"
    rich = [p for p in ws["platforms"] if isinstance(p, dict)]
    assert rich == [{"name": "linux-64-cuda12-6", "platform": "linux-64", "cuda": "12.6"}]
    assert manifest["dependencies"]["pytorch"] == "2.7.*"  # conda's =2.7, as pixi reads it
    assert manifest["environments"] == {"cpu": ["cpu"], "cuda12-6": ["cuda12-6"]}
    assert manifest["feature"]["cuda12-6"]["platforms"] == ["linux-64-cuda12-6"]

    # each environment, solved as pixi would (its features' dependencies on the platform's
    # virtual packages), gets the build its envtool variant locked
    for env_name, want, cuda in (("cpu", "cpu_mkl", None), ("cuda12-6", "cuda126_mkl", "12.6")):
        deps = dict(manifest["dependencies"])
        for feature in manifest["environments"][env_name]:
            deps.update(manifest["feature"][feature]["dependencies"])
        records = cb.solve_records(setup.channel, [_as_spec(n, v) for n, v in deps.items()], cuda)
        torch = next(r for r in records if r.name.normalized == "pytorch")
        assert str(torch.build).startswith(want), (env_name, torch.build)


def test_the_arch_goes_into_cuda_driver_arch_and_names_cannot_break_the_toml() -> None:
    hostile = 'x"\n[evil]\nkey = "\\\x1b'
    text = render_pixi_toml(
        hostile,
        ["conda-forge", 'q"uote'],
        ["linux-64", "osx-arm64"],
        [parse_conda_spec("numpy>=2"), parse_conda_spec("pytorch 2.7.* cuda*")],
        [("requests", ">=2")],
        [
            plan_pixi_variant("cuda12.8", "12.8", "conda-forge", "7.5"),
            plan_pixi_variant("cpu", None, "conda-forge"),
        ],
        "e.yml",
    )
    data = tomllib.loads(text)
    assert data["workspace"]["name"] == hostile and "evil" not in data
    assert data["workspace"]["channels"] == ["conda-forge", 'q"uote']
    assert data["workspace"]["platforms"][2] == {
        "name": "linux-64-cuda12-8",
        "platform": "linux-64",
        "cuda": {"driver": "12.8", "arch": "7.5"},
    }
    assert data["dependencies"] == {"numpy": ">=2", "pytorch": "2.7.*"}  # the build: per variant
    assert data["pypi-dependencies"] == {"requests": ">=2"}
    assert data["feature"]["cuda12-8"]["dependencies"] == {
        "pytorch": {"version": "*", "build": "cuda128*"},
        "cuda-version": "12.8.*",
    }
    legacy = plan_pixi_variant("cuda12.1", "12.1", "pytorch")
    assert legacy.dependencies == (("pytorch-cuda", "12.1.*"),)
    for raw in ("a\x00b", "\u2028", "back\\slash", "tab\there"):
        assert tomllib.loads(f"k = {toml_string(raw)}")["k"] == raw
