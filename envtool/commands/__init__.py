"""One module per verb. Each exposes a click command `cmd`; cli.py loads them lazily."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

# Options several commands share live here, not in one command module (commands never import
# each other). `create`, `lock` and `export` find environments/NAME under the same project folder.
project_dir_option = click.option(
    "--dir",
    "directory",
    default=None,
    type=click.Path(file_okay=False),
    help="Project folder holding environments/ (default: .).",
)


def renders(func: Callable[..., Any]) -> Callable[..., None]:
    """The one place a command's outcome becomes output and an exit code: the command returns a
    `Result` (or raises an EnvtoolError, which cli.py renders); this prints it with
    `output.emit` (--json: the envelope) and exits with its `exit_code`. Put it right above
    `def cmd`, under the click decorators. A command that returns None printed nothing (run
    execs the user's command and never returns)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        result = func(*args, **kwargs)
        if result is None:
            return
        from envtool.output import emit

        emit(result, bool(kwargs.get("as_json", False)))
        if result.exit_code:
            raise click.exceptions.Exit(result.exit_code)

    return wrapper
