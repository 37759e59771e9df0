"""One module per verb. Each exposes a click command `cmd`; cli.py loads them lazily."""

from __future__ import annotations

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
