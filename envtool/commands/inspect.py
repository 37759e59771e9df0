"""`envtool inspect FILE`: report what CUDA any environment file asks for."""

from __future__ import annotations

from pathlib import Path

import click

from envtool.errors import UsageError, not_utf8
from envtool.output import Result, emit


def read_env_file(path: Path) -> str:
    """The file's text, or a UsageError that names it."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file", "pass the path of an environment.yml") from None
    except IsADirectoryError:
        raise UsageError(
            f"{path}: is a directory", "pass the environment.yml file inside it"
        ) from None
    except UnicodeDecodeError as exc:  # e.g. saved as UTF-16 by a Windows editor
        raise not_utf8(path, exc) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc})", "check the file") from None


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
def cmd(file: Path, as_json: bool) -> None:
    """Report what CUDA an environment file asks for, the driver it needs, and its problems.

    FILE is any conda environment.yml (conda-forge, pytorch channel, cudatoolkit or pip wheels).
    """
    emit(run_inspect(file), as_json)
