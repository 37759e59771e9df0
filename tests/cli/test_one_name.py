"""Issue 21's "one way to name an environment in every command": a command that takes a NAME
takes `-n/--name NAME` too. Read from the commands themselves, so the next command added with a
NAME and without the alias fails here."""

from __future__ import annotations

import click
import pytest

from envtool.cli import COMMANDS, _click_cli


def _commands() -> dict[str, click.Command]:
    group = _click_cli()
    ctx = click.Context(group)
    return {name: group.get_command(ctx, name) for name in COMMANDS}


def test_every_command_that_takes_a_name_takes_n_and_dash_dash_name() -> None:
    takes_name, missing = [], []
    for name, cmd in _commands().items():
        positional = any(isinstance(p, click.Argument) and p.name == "name" for p in cmd.params)
        options = {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts}
        if positional or "--name" in options or "--prefix" in options:
            takes_name.append(name)
            if not {"-n", "--name"} <= options:
                missing.append(name)
    assert missing == []
    # the package verbs (the last ones without it) are among them: the test looks at real commands
    assert {"add", "drop", "update", "create", "lock", "install", "launch", "run"} <= set(
        takes_name
    )


@pytest.mark.parametrize("command", ["add", "drop", "update", "lock"])
def test_a_name_that_leaves_the_folder_is_refused_without_a_flag_the_command_lacks(
    run_cli, tmp_path, command
) -> None:
    """`add -n ../x` is refused in one line whose fix works for that command (add has no
    --prefix, so the hint must not stop at 'pass --prefix PATH')."""
    args = [command, "-n", "../x"] + (["numpy"] if command in ("add", "drop") else [])
    code, out, err = run_cli([*args, "--dir", str(tmp_path)])
    assert code == 2 and "'../x': not a valid environment name" in err, err
    assert "a NAME is one folder name" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing written
