"""`envtool drop NAME PKG…`: take conda packages out of environments/NAME/environment.yml,
re-lock, print the lock diff, install. (`remove` deletes a whole installed environment, as
`conda remove --all` does; dropping a package is this verb's job, so the two never mix.)"""

from __future__ import annotations

import click

from envtool.commands import env_name, relock_options, renders
from envtool.output import Result
from envtool.workflows.edit import edit_verb


@click.command("drop")
@env_name(required=True, rest="packages")
@click.argument("packages", nargs=-1)
@relock_options
@renders
def cmd(name: str, packages: tuple[str, ...], **flags: bool | str | None) -> Result:
    """Drop conda packages (by name) from NAME's environment.yml, re-lock, install."""
    directory = flags.pop("directory")
    return edit_verb("drop", name, directory, (), packages, **flags)  # type: ignore[arg-type]
