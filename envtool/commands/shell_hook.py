"""`envtool shell-hook NAME`: print the activation script, for `eval "$(envtool shell-hook NAME)"`."""

from __future__ import annotations

import click

from envtool.commands import env_name, renders
from envtool.output import Result


@click.command("shell-hook")
@env_name
@click.option("--prefix", help="The environment's directory instead of NAME.")
@click.option(
    "--shell",
    "shell",
    type=click.Choice(["bash", "zsh", "sh", "fish", "powershell"]),
    default="bash",
    show_default=True,
    help="The shell whose syntax to print.",
)
@renders
def cmd(name: str | None, prefix: str | None, shell: str) -> Result:
    """Print the script that activates NAME in SHELL (PATH, CONDA_PREFIX, activate.d scripts)."""
    from envtool.adapters.launch.activation import render_activation_script
    from envtool.adapters.locate import existing_env

    target = existing_env(name, prefix)
    return Result("shell-hook", raw=render_activation_script(target, shell))
