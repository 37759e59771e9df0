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
        assert any(len(line) > width for line in expected.splitlines())
        assert cli_mod.fast_help(10_000) != expected
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
    assert "Commands:" in out
