"""`envtool add NAME PKG…`: list conda packages in environments/NAME/environment.yml, re-lock
every lock the project has, print the lock diff, install (pixi add / conda install)."""

from __future__ import annotations

import click

from envtool.commands import relock_options, renders
from envtool.core.env_edit import edit_dependencies
from envtool.output import Result
from envtool.workflows.edit import finish_verb, parse_package_args, read_request_file, relock


@click.command("add")
@click.argument("name")
@click.argument("packages", nargs=-1, required=True)
@relock_options
@renders
def cmd(
    name: str,
    packages: tuple[str, ...],
    directory: str | None,
    no_install: bool,
    dry_run: bool,
    as_json: bool,
) -> Result:
    """Add conda packages (MatchSpecs: numpy, 'scipy>=1.11') to NAME, re-lock, install.

    A package already listed has its spec replaced; every other line of environment.yml
    (comments, order, pip) is kept. environment.yml changes only with the locks solved from it."""
    yml_path, old = read_request_file(name, directory)
    edit = edit_dependencies(old, str(yml_path), parse_package_args(packages, "add"), [])
    outcome = relock(name, directory, edit.text, old, dry_run=dry_run)
    outcome.edit = edit
    return finish_verb("add", outcome, directory, no_install, as_json)
