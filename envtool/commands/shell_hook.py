"""`envtool shell-hook NAME`: print the activation script, for `eval "$(envtool shell-hook NAME)"`."""

from __future__ import annotations

import click

from envtool.commands import env_name, renders
from envtool.output import Result

SHELLS = ("bash", "zsh", "sh", "fish", "powershell")


def login_shell() -> str:
    """The shell $SHELL names (pixi's shell-hook default), when it is one envtool writes;
    else bash. `pwsh` is powershell."""
    import os

    base = os.path.basename(os.environ.get("SHELL", ""))
    base = "powershell" if base in ("pwsh", "powershell") else base
    return base if base in SHELLS else "bash"


@click.command("shell-hook")
@env_name
@click.option("-p", "--prefix", help="The environment's directory instead of NAME.")
@click.option(
    "--shell",
    "shell",
    type=click.Choice(SHELLS),
    default=None,
    help="The shell whose syntax to print (default: $SHELL's, else bash).",
)
@renders
def cmd(name: str | None, prefix: str | None, shell: str | None) -> Result:
    """Print the script that activates NAME in SHELL (PATH, CONDA_PREFIX, activate.d scripts)."""
    from envtool.adapters.launch.activation import render_activation_script
    from envtool.adapters.locate import existing_env

    target = existing_env(name, prefix)
    return Result("shell-hook", raw=render_activation_script(target, shell or login_shell()))
