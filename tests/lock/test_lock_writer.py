"""conda-lock.yml is written by envtool's renderer (core/lock_render.py), held here to conda-lock's
own writer byte for byte: conda-lock (a test dependency) is the oracle for the format.

The renderer exists for speed: conda-lock's models cost ~0.5 s to import and its writer hands
~27,000 nodes to PyYAML's Python representer at 1,000 packages (docs/benchmarks-scaling.md).
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from solve_scenarios import scenarios

from envtool.adapters.lockfile.lock_io import load_yaml, read_lock
from envtool.core.lock_render import render_lock_v1
from envtool.core.lockfile import LockContent, PipPackage, SolvedPackage

conda_lock_lockfile = pytest.importorskip("conda_lock.lockfile")


def conda_lock_writes(
    tmp_path: Path,
    packages: dict[str, list[SolvedPackage]],
    pip_packages: dict[str, list[PipPackage]],
    channels: list[str],
    content_hash: dict[str, str],
    custom_metadata: dict[str, str],
    sources: list[str],
) -> str:
    """What conda-lock's own models and writer write for the same solution (the oracle)."""
    from conda_lock.lockfile.v1.models import HashModel, LockMeta
    from conda_lock.lockfile.v2prelim.models import LockedDependency, Lockfile
    from conda_lock.models.channel import Channel

    from envtool.core.lockfile import dependency_map

    entries = [
        LockedDependency(
            name=p.name,
            version=p.version,
            manager="conda",
            platform=platform,
            dependencies=dependency_map(p.depends),
            url=p.url,
            hash=HashModel(md5=p.md5 or "", sha256=p.sha256),
            build=p.build,
            categories={"main"},
        )
        for platform, pkgs in sorted(packages.items())
        for p in pkgs
    ] + [
        LockedDependency(
            name=q.name,
            version=q.version,
            manager="pip",
            platform=platform,
            dependencies={d: "*" for d in sorted(q.dependencies)},
            url=q.url,
            hash=HashModel(sha256=q.sha256),
            categories={"main"},
        )
        for platform, pkgs in sorted(pip_packages.items())
        for q in pkgs
    ]
    lock = Lockfile(
        package=entries,
        metadata=LockMeta(
            content_hash=dict(sorted(content_hash.items())),
            channels=[Channel.from_string(c) for c in channels],
            platforms=sorted(packages),
            sources=sources,
            custom_metadata=dict(sorted(custom_metadata.items())),
        ),
    )
    out = tmp_path / "conda-lock.yml"
    conda_lock_lockfile.write_conda_lock_file(lock, out, metadata_choices=None)
    return out.read_text()


def solution_of(
    lock_path: Path,
) -> tuple[dict[str, list[SolvedPackage]], dict[str, list[PipPackage]]]:
    """A real lock's packages as the solution objects envtool writes from."""
    lock = read_lock(lock_path)
    conda: dict[str, list[SolvedPackage]] = {p: [] for p in lock.platforms}
    pip: dict[str, list[PipPackage]] = {}
    for p in lock.packages:
        deps = load_deps(lock_path, p.name, p.platform, p.manager)
        if p.manager == "conda":
            conda.setdefault(p.platform, []).append(
                SolvedPackage(
                    name=p.name,
                    version=p.version,
                    build=p.build,
                    platform=p.platform,
                    url=p.url,
                    md5=p.md5,
                    sha256=p.sha256,
                    depends=tuple(f"{k} {v}" if v != "*" else k for k, v in deps.items()),
                )
            )
        else:
            pip.setdefault(p.platform, []).append(
                PipPackage(p.name, p.version, p.platform, p.url, p.sha256, tuple(deps))
            )
    return conda, pip


_RAW: dict[Path, list] = {}


def load_deps(lock_path: Path, name: str, platform: str, manager: str) -> dict[str, str]:
    if lock_path not in _RAW:
        _RAW[lock_path] = load_yaml(lock_path.read_bytes())["package"]
    for dep in _RAW[lock_path]:
        if (dep["name"], dep["platform"], dep["manager"]) == (name, platform, manager):
            return {str(k): str(v) for k, v in (dep.get("dependencies") or {}).items()}
    return {}


def both(tmp_path: Path, *args) -> tuple[str, str]:
    ours = render_lock_v1("conda-lock.yml", LockContent(*args))
    return ours, conda_lock_writes(tmp_path, *args)


META = {"envtool_cuda": "12.6", "envtool_request": '{"cuda":"12.6","gpus":["9.0"]}'}


def test_real_locks_render_as_conda_lock_renders_them(fixtures: Path, tmp_path: Path) -> None:
    locks = sorted((fixtures / "locks").rglob("*conda-lock*.yml"))
    assert len(locks) >= 4
    for path in locks:
        conda, pip = solution_of(path)
        lock = read_lock(path)
        ours, theirs = both(
            tmp_path, conda, pip, lock.channels, lock.content_hash, META, ["environment.yml"]
        )
        assert ours == theirs, path.name


# values a channel or a user can put in a lock: indicators, YAML 1.1 booleans/numbers/nulls,
# quotes, colons, spaces, long text, non-ASCII (escaped and folded by PyYAML), control characters
HOSTILE = [
    "",
    "*",
    "-",
    "?",
    ":",
    "x:",
    "a: b",
    "a #b",
    "#x",
    "---x",
    "...",
    "12.6",
    "1_000",
    "0x1f",
    "1e3",
    ".inf",
    "true",
    "No",
    "on",
    "~",
    "null",
    "=",
    "<<",
    "2001-12-14",
    "190:20:30",
    "'q'",
    'd"q',
    "back\\slash",
    "@at",
    "`tick",
    "%pct",
    "!tag",
    "&anchor",
    "|pipe",
    ">gt",
    ">=12.6,<13",
    "3.11.* *_cp311",
    "a" * 200,
    "sp " * 40,
    "jos\u00e9",
    "\u00fc" * 90,
    "tab\tx",
    "nl\nx",
    "bell\x07",
    "[x]",
    "{x}",
    "x,y",
    "x]",
    "-x",
    "?x",
    ":x",
    "https://u:p@h/c",
]


def test_hostile_values_render_as_conda_lock_renders_them(tmp_path: Path) -> None:
    rng = random.Random(0)
    pkgs = []
    for i, value in enumerate(
        HOSTILE + [rng.choice(HOSTILE) + rng.choice(HOSTILE) for _ in range(60)]
    ):
        pkgs.append(
            SolvedPackage(
                name=f"p{i:03d}" if i % 3 else value or "x",
                version=value or "1",
                build=value,
                platform="linux-64",
                url=f"https://h/c/linux-64/{value}.conda",
                md5=value or None,
                sha256=value or None,
                depends=(f"dep{i} {value}", f"{value or 'y'}", "python >=3.10"),
            )
        )
    pip = {"linux-64": [PipPackage("w", "1.0", "linux-64", "https://h/w.whl", None, ("a", "b b"))]}
    # channel URLs are left out: conda-lock normalises them (drops a bare `?`, swaps a token for
    # a ${VAR} it finds in the environment); envtool writes the channel it was given, masked
    meta = {f"k{i:02d}": value for i, value in enumerate(HOSTILE)} | META
    ours, theirs = both(
        tmp_path,
        {"linux-64": pkgs},
        pip,
        ["conda-forge", "https://h/c"],
        {"linux-64": "x"},
        meta,
        [f"envs/{v}.yml" for v in HOSTILE if v.isprintable()],
    )
    assert ours == theirs
    assert yaml.safe_load(ours)["metadata"]["custom_metadata"] == meta


def test_an_empty_solution_renders_as_conda_lock_renders_it(tmp_path: Path) -> None:
    ours, theirs = both(tmp_path, {"linux-64": []}, {}, ["conda-forge"], {}, META, [])
    assert ours == theirs


@pytest.mark.integration
@pytest.mark.parametrize("scenario", ["conda-forge-cuda12.6", "legacy-pytorch-cuda12.1"])
def test_a_real_solve_is_written_without_importing_conda_lock(
    harvested: Path, run_cli, tmp_path: Path, scenario: str
) -> None:
    """`envtool create` writes the lock; conda-lock reads it back to the same packages, and the
    lock path imports no conda-lock (its models were half a second of every lock)."""
    args = ["--platform", "linux-64", "--platform", "osx-arm64", *scenarios(harvested)[scenario]]
    assert run_cli(["create", "w", "--no-install", *args], tmp_path)[0] == 0
    lock = tmp_path / "environments" / "w" / "conda-lock.yml"
    theirs = conda_lock_lockfile.parse_conda_lock_file(lock)
    ours = read_lock(lock)
    assert sorted((d.name, d.platform, d.url, d.hash.sha256) for d in theirs.package) == sorted(
        (p.name, p.platform, p.url, p.sha256) for p in ours.packages
    )
    code = (
        "import sys; from envtool.cli import main; sys.argv = ['envtool', 'lock', 'w', '--force'];\n"
        "try: main()\nexcept SystemExit as e: assert not e.code, e.code\n"
        "assert not [m for m in sys.modules if m.startswith(('conda_lock', 'pydantic'))]"
    )
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, capture_output=True)
