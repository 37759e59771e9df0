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
    from envtool.core.inspect import inspect_env, render_inspect_text
    from envtool.core.spec import parse_environment_yml

    env = parse_environment_yml(read_env_file(path), str(path))
    ask = inspect_env(env)
    data = {"file": str(path), **ask.to_data()}
    return Result(command="inspect", data=data, text=render_inspect_text(ask, path.name))


@click.command("inspect")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(file: Path, as_json: bool) -> Result:
    """Report what CUDA an environment file asks for, the driver it needs, and its problems.

    FILE is any conda environment.yml (conda-forge, pytorch channel, cudatoolkit or pip wheels).
    """
    return run_inspect(file)
