"""Issue 21's "one way to name an environment in every command": a command that takes a NAME
takes `-n/--name NAME` too. Read from the commands themselves, so the next command added with a
NAME and without the alias fails here."""

from __future__ import annotations

import json

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


@pytest.mark.parametrize("args", [["create", "foo", "numpy"], ["create", "-n", "foo", "a", "b"]])
def test_packages_after_creates_name_say_create_takes_none(run_cli, tmp_path, args) -> None:
    """`create -n foo python=3.11 numpy` (conda's habit) got click's bare "Got unexpected extra
    argument (numpy)"."""
    code, _, err = run_cli([*args, "--dir", str(tmp_path)])
    assert code == 2 and "Got unexpected extra argument" in err, err
    assert "create takes no packages: pin with --python 3.11 / --torch 2.7" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["create", "-n", "foo", "python=3.11"], "'python=3.11'"),  # conda's habit
        (["create", "pytorch=2.13", "--cuda", "cpu"], "'pytorch=2.13'"),  # was an env's name
        (["install", "numpy>=2"], "'numpy>=2'"),
    ],
)
def test_a_package_spec_where_the_name_goes_is_named_as_one(run_cli, tmp_path, args, said) -> None:
    """`create -n foo python=3.11` said NAME and -n "disagree"; `create pytorch=2.13` planned an
    environment called `pytorch=2.13`."""
    code, _, err = run_cli([*args, "--dir", str(tmp_path)] if args[0] == "create" else args)
    assert code == 2 and f"NAME {said} is a package spec, not an environment name" in err, err
    assert len(err.strip().splitlines()) == 1
    if args[0] == "create":
        assert "create takes no packages: pin with --python 3.11 / --torch 2.7" in err
    else:
        assert "packages go to `envtool add NAME PKG`" in err
    assert list(tmp_path.iterdir()) == []


def test_add_with_n_still_takes_a_pinned_package_first(run_cli, tmp_path) -> None:
    """`add -n train numpy=1.26`: the first positional is a package (conda install -n), not NAME."""
    code, _, err = run_cli(["add", "-n", "train", "numpy=1.26", "--dir", str(tmp_path)])
    assert "package spec, not an environment name" not in err
    assert code == 2 and "train" in err, err


def test_an_existing_env_or_a_path_with_an_equals_sign_is_still_a_name(
    run_cli, tmp_path, monkeypatch
) -> None:
    """conda allows `=` in env names: `remove py=3.11` of an env `list` shows, or an env at
    `/scratch/job=42/env`, must not be read as a package spec."""
    monkeypatch.setenv("ENVTOOL_ENVS_DIR", str(tmp_path / "envs"))
    (tmp_path / "envs" / "py=3.11" / "conda-meta").mkdir(parents=True)
    (tmp_path / "envs" / "py=3.11" / "conda-meta" / "history").write_text("")
    code, out, err = run_cli(["info", "py=3.11", "--json"])
    assert code == 0, err
    assert json.loads(out)["prefix"] == str(tmp_path / "envs" / "py=3.11")
    (tmp_path / "job=42" / "env" / "conda-meta").mkdir(parents=True)
    (tmp_path / "job=42" / "env" / "conda-meta" / "history").write_text("")
    code, _, err = run_cli(["info", str(tmp_path / "job=42" / "env"), "--json"])
    assert code == 0, err
