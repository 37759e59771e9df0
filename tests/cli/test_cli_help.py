"""`envtool --help` is printed without importing click; it must read exactly as click's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envtool import cli as cli_mod


@pytest.mark.parametrize("width", [78, 74, 60])
def test_fast_help_matches_click(width: int) -> None:
    import click

    group = cli_mod._click_cli()
    ctx = click.Context(
        group,
        info_name="envtool",
        terminal_width=width + 2,
        max_content_width=width + 2,
        **group.context_settings,
    )
    expected = group.get_help(ctx) + "\n"
    text = cli_mod.fast_help(width)
    if text is None:  # a line would wrap: main() falls back to click, whose text differs
        wide = cli_mod.fast_help(10_000) or ""
        assert len(expected.splitlines()) > len(wide.splitlines())  # click wrapped a line
        assert wide != expected
    else:
        assert text == expected


@pytest.mark.integration
def test_help_does_not_import_click() -> None:
    """`envtool --help` must stay fast: no click, rattler, conda-lock, yaml or pynvml."""
    code = (
        "import sys\nfrom envtool.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as e:\n    print('RC', e.code)\n"
        "print('CLICK', 'click' in sys.modules)\n"
        "heavy = [m for m in ('rattler', 'conda_lock', 'yaml', 'pynvml') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "100", "PATH": ""},
    ).stdout
    assert "RC 0" in out and "CLICK False" in out, out
    assert "HEAVY []" in out, out
    assert out.startswith("Usage: envtool [OPTIONS] COMMAND [ARGS]...\n")


@pytest.mark.integration
def test_narrow_terminal_falls_back_to_click() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "envtool", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "60", "PATH": ""},
    ).stdout
    assert all(len(line) <= 58 for line in out.splitlines()), out
    assert "Diagnose:" in out and "Train & run:" in out


def test_help_groups_every_command_by_workflow() -> None:
    """Sections a user can scan by what they want to do; no command is dropped by the grouping."""
    text = cli_mod.fast_help(10_000) or ""
    titles = [line[:-1] for line in text.splitlines() if line.endswith(":") and line[0] != " "]
    assert titles[1:6] == ["Environments", "Packages", "Locks & sharing", "Diagnose", "Train & run"]
    after = text.split("Environments:", 1)[1].splitlines()
    listed = [line.split()[0] for line in after if line.startswith("  ")]
    assert sorted(listed) == sorted(cli_mod.COMMANDS)
    section = text.split("Diagnose:\n", 1)[1].split("\n\n", 1)[0]
    assert [line.split()[0] for line in section.splitlines()] == ["doctor", "verify", "config"]
    assert "Other commands:" not in text  # every command has its section
    # a command added without a section still shows, under "Other commands"
    cli_mod.COMMANDS["zz-new"] = ("envtool.commands.list", "A new command.")
    try:
        assert "Other commands:\n  zz-new  A new command." in (cli_mod.fast_help(10_000) or "")
    finally:
        del cli_mod.COMMANDS["zz-new"]
