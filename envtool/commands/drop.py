"""`envtool drop NAME PKG…`: take conda packages out of environments/NAME/environment.yml,
re-lock, print the lock diff, install. (`remove` deletes a whole installed environment, as
`conda remove --all` does; dropping a package is this verb's job, so the two never mix.)"""

from __future__ import annotations

import click

from envtool.commands import relock_options, renders
from envtool.core.env_edit import edit_dependencies
from envtool.output import Result
from envtool.workflows.edit import finish_verb, read_request_file, relock


@click.command("drop")
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
    """Drop conda packages (by name) from NAME's environment.yml, re-lock, install."""
    yml_path, old = read_request_file(name, directory)
    edit = edit_dependencies(old, str(yml_path), [], list(dict.fromkeys(packages)))
    outcome = relock(name, directory, edit.text, old, dry_run=dry_run)
    outcome.edit = edit
    return finish_verb("drop", outcome, directory, no_install, as_json)
