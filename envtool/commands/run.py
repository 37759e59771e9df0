"""`envtool run -n NAME -- CMD...`: run a command inside the activated environment."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from envtool.commands import renders


@click.command(
    "run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.option("-n", "--name", help="Environment name (under the envs dir).")
@click.option("--prefix", help="The environment's directory instead of -n NAME.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@renders
def cmd(name: str | None, prefix: str | None, command: tuple[str, ...]) -> None:
    """Activate the environment (activate.d scripts included) and exec COMMAND; its exit code is ours."""
    from envtool.adapters.install.install_state import read_install_state
    from envtool.adapters.launch.activation import activated_environ
    from envtool.adapters.locate import existing_env
    from envtool.errors import UsageError
    from envtool.output import note

    target = existing_env(name, prefix)
    if read_install_state(target) == "incomplete":
        from envtool.adapters.install.installed import describe_env, finish_command

        note(
            f"warning: {target.name} is incomplete (an install was interrupted); "
            f"run `{finish_command(describe_env(target))}`"
        )
    env = activated_environ(target)
    exe = shutil.which(command[0], path=env.get("PATH"))
    if exe is None:
        if os.sep in command[0] and Path(command[0]).exists():  # which() found it unrunnable
            kind = "a directory" if Path(command[0]).is_dir() else "not executable"
            raise UsageError(f"{command[0]}: {kind}", "run a program or script file")
        raise UsageError(
            f"{command[0]}: command not found in {target.name}",
            "check the name, or install it into the env",
        )
    # exec: signals, stdin and the exit code are the command's own, with no wrapper process.
    os.execve(exe, [command[0], *command[1:]], env)
