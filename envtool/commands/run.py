"""`envtool run [NAME] -- CMD...` (or `-n NAME`, `--prefix PATH`, or the active environment):
run a command inside the activated environment, a conda env or a plain venv."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import click

from envtool.commands import refuse_own_env, renders, resolve_and_say, say_target

_AFTER_DASHES = "envtool_run_command"


class RunCommand(click.Command):
    """`envtool run NAME -- CMD`: a positional NAME is only read before `--` (without `--`,
    every word is the command: `envtool run python train.py` runs python in the active env)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            ctx.meta[_AFTER_DASHES] = args[i + 1 :]
            args = args[:i]
        return super().parse_args(ctx, args)


@click.command(
    "run",
    cls=RunCommand,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("-n", "--name", help="Environment name (the same as NAME before --).")
@click.option("-p", "--prefix", help="The environment's directory (a conda env or a venv).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@renders
def cmd(name: str | None, prefix: str | None, command: tuple[str, ...]) -> None:
    """Activate the environment (activate.d scripts included) and exec COMMAND; its exit code is
    ours. With no NAME, -n or --prefix: the active conda env, else the active venv (none
    active: an error, never envtool's own python).

    \b
    envtool run myenv -- python train.py
    envtool run -n myenv python train.py
    envtool run python train.py          # in the active environment
    """
    from envtool.adapters.install.install_state import read_install_state
    from envtool.adapters.launch.launcher import read_activated_environ
    from envtool.errors import UsageError
    from envtool.output import note

    ctx = click.get_current_context()
    if _AFTER_DASHES in ctx.meta:  # words before `--` name the env, after it the command
        before, command = command, tuple(ctx.meta[_AFTER_DASHES])
        if len(before) > 1 or (before and before[0].startswith("-")):
            raise UsageError(
                f"{' '.join(before)} --: one NAME goes before --", "envtool run NAME -- CMD"
            )
        if before:
            name = _one_name(before[0], name)
    if not command:
        raise UsageError("no command to run", "envtool run NAME -- CMD (e.g. python train.py)")
    if _AFTER_DASHES not in ctx.meta and name is None and prefix is None:
        _refuse_env_as_command(command)
    target = resolve_and_say("run", "running in", name, prefix)
    # envtool's own venv (pipx, uv tool) is never where a command was meant to run, and
    # `envtool run pip install X` there would change envtool itself
    refuse_own_env(target, "run", " -- CMD")
    assert target.prefix is not None  # resolve_target gives every env-like target its prefix
    if read_install_state(target.prefix) == "incomplete":
        from envtool.adapters.install.installed import describe_env, finish_command

        note(
            f"warning: {target.prefix.name} is incomplete (an install was interrupted); "
            f"run `{finish_command(describe_env(target.prefix))}`"
        )
    env = read_activated_environ(target.prefix, os.environ)
    exe = shutil.which(command[0], path=env.get("PATH"))
    if exe is None:
        if os.sep in command[0] and Path(command[0]).exists():  # which() found it unrunnable
            kind = "a directory" if Path(command[0]).is_dir() else "not executable"
            raise UsageError(f"{command[0]}: {kind}", "run a program or script file")
        raise UsageError(
            f"{command[0]}: command not found in {target.label}",
            "check the name, or install it into the env",
        )
    say_target()
    # exec: signals, stdin and the exit code are the command's own, with no wrapper process.
    os.execve(exe, [command[0], *command[1:]], env)


def _refuse_env_as_command(command: tuple[str, ...]) -> None:
    """`envtool run demo python x.py` or `envtool run demo` (no `--`): demo is an environment
    and no program of that name is on PATH, so the `--` was forgotten; say where it goes."""
    from envtool.adapters.locate import env_prefix, is_venv, looks_like_env
    from envtool.core.shell_quote import join_posix
    from envtool.errors import UsageError

    try:
        where = env_prefix(command[0])
    except UsageError:  # not a name an env could have
        return
    # a conda env or a venv, not any folder (`run /tmp/plain python`)
    env_like = looks_like_env(where) or is_venv(where)
    is_env = shutil.which(command[0]) is None and env_like
    if not is_env:
        return
    fixed = join_posix(["envtool", "run", command[0], "--", *command[1:]])
    if len(command) == 1:
        raise UsageError(f"{command[0]} is an environment and no command followed", fixed + " CMD")
    raise UsageError(f"{command[0]} is an environment", fixed)


def _one_name(positional: str, option: Any) -> str:
    from envtool.errors import UsageError

    if option is not None and option != positional:
        raise UsageError(
            f"NAME {positional!r} and -n {option!r} disagree", "name the environment once"
        )
    return positional
