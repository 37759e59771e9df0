"""`envtool add NAME PKG…`: list conda packages in environments/NAME/environment.yml, re-lock
every lock the project has, print the lock diff, install (pixi add / conda install)."""

from __future__ import annotations

import click

from envtool.commands import env_name, relock_options, renders
from envtool.output import Result
from envtool.workflows.edit import edit_verb


@click.command("add")
@env_name(required=True, rest="packages")
@click.argument("packages", nargs=-1)
@relock_options
@renders
def cmd(name: str, packages: tuple[str, ...], **flags: bool | str | None) -> Result:
    """Add conda packages (MatchSpecs: numpy, 'scipy>=1.11') to NAME, re-lock, install.

    A package already listed has its spec replaced; every other line of environment.yml
    (comments, order, pip) is kept. environment.yml changes only with the locks solved from it."""
    directory = flags.pop("directory")
    return edit_verb("add", name, directory, packages, (), **flags)  # type: ignore[arg-type]
