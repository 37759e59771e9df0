"""`envtool inspect FILE`: report what CUDA any environment file asks for."""

from __future__ import annotations

from pathlib import Path

import click

from envtool.commands import renders
from envtool.output import Result


def read_env_file(path: Path) -> str:
    """The file's text, or a one-line UsageError that names it: regular files only, size-capped
    and opened non-blocking (/dev/zero or a FIFO must not fill memory or hang)."""
    from envtool.adapters.files import ENV_FILE_LIMIT, read_text

    return read_text(path, ENV_FILE_LIMIT, what="environment file")


def run_inspect(path: Path) -> Result:
    from envtool.adapters.lockfile.pixi_lock import looks_like_pixi_lock

    if path.is_file() and looks_like_pixi_lock(path):
        return inspect_pixi_lock(path)
    if path.is_file() and looks_like_conda_lock(path):
        return inspect_conda_lock(path)
    from envtool.core.inspect import inspect_env, render_inspect_text
    from envtool.core.spec import parse_environment_yml

    env = parse_environment_yml(read_env_file(path), str(path))
    ask = inspect_env(env)
    data = {"file": str(path), **ask.to_data()}
    return Result(command="inspect", data=data, text=render_inspect_text(ask, path.name))


def inspect_pixi_lock(path: Path) -> Result:
    """Each environment × platform of a pixi.lock: its torch build, CUDA and the driver it needs."""
    from envtool.adapters.lockfile.pixi_lock import read_pixi_lock

    pixi = read_pixi_lock(path)
    targets = pixi.targets()
    text = [f"{path.name}: pixi.lock version {pixi.version}, {len(pixi.packages)} environments"]
    text += [f"  {t.describe()}" for t in targets]
    data = {"file": str(path), "kind": "pixi.lock", "version": pixi.version}
    data["targets"] = [t.to_dict() for t in targets]
    return Result(command="inspect", data=data, text=text)


def looks_like_conda_lock(path: Path) -> bool:
    """A conda-lock.yml by name, or a file whose first keys are conda-lock's (`version:` then
    `metadata:`); reads at most 4 KiB. It was read as an environment.yml with no dependencies:
    "asks for no torch" of a lock that holds one."""
    if path.name.endswith("conda-lock.yml"):
        return True
    from envtool.adapters.files import head_keys

    keys = head_keys(path)  # the reader reads the file bounded afterwards
    return len(keys) >= 2 and keys[0].startswith("version:") and keys[1] == "metadata:"


def inspect_conda_lock(path: Path) -> Result:
    """Each platform of a conda-lock.yml, judged as a pixi.lock's (core/pixi.judge_target: the
    one reading of what a lock's packages need of a host)."""
    from envtool.adapters.lockfile.lock_io import read_lock
    from envtool.core.pixi import judge_target

    lock = read_lock(path)
    targets = [judge_target("lock", p, lock.for_platform(p)) for p in sorted(lock.platforms)]
    text = [f"{path.name}: conda-lock, {len(targets)} platform(s)"]
    text += [f"  {t.describe().removeprefix('lock ')}" for t in targets]
    data = {"file": str(path), "kind": "conda-lock", "targets": [t.to_dict() for t in targets]}
    return Result(command="inspect", data=data, text=text)


@click.command("inspect")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(file: Path, as_json: bool) -> Result:
    """Report what CUDA an environment file asks for, the driver it needs, and its problems.

    FILE is any conda environment.yml (conda-forge, pytorch channel, cudatoolkit or pip wheels),
    a conda-lock.yml (each platform) or a pixi.lock (each environment × platform): its torch
    build, CUDA and driver floor.
    """
    return run_inspect(file)
