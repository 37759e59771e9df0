"""`envtool update NAME [PKG…]`: re-solve NAME for the newest versions its specs allow and print
the lock diff. With PKG…, only those move: every other package is held at its locked build."""

from __future__ import annotations

import click

from envtool.commands import env_name, relock_options, renders
from envtool.output import Result
from envtool.workflows.edit import finish_verb, read_request_file, relock


@click.command("update")
@env_name(required=True, rest="packages")
@click.argument("packages", nargs=-1)
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
    """Update NAME's locked packages (all, or PKG… only) to the newest its specs allow."""
    _, text = read_request_file(name, directory)
    outcome = relock(
        name, directory, text, text, force=True, dry_run=dry_run, updated=set(packages) or None
    )
    return finish_verb("update", outcome, directory, no_install, as_json)
