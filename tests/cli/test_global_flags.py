"""The group's flags (--no-color, --debug, --offline) after the command name too: `envtool doctor
--no-color` as `envtool --no-color doctor` (git, pixi and uv users put them there)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from envtool.cli import COMMANDS, GLOBAL_FLAGS


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """`envtool ARGS` with stdout on a real pseudo-terminal (color is for terminals only)."""
    main, child = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "envtool", *args],
            stdout=child,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        os.close(child)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=120) in (0, 1)
    finally:
        os.close(main)
    return b"".join(chunks).decode()


@pytest.mark.integration
def test_no_color_is_honoured_after_the_command_as_before_it(fake_h200, tmp_path, env) -> None:
    env.pop("NO_COLOR", None)
    record = fake_h200.record(tmp_path / "rec")
    colored = _on_a_terminal(["doctor", "--replay", str(record)], env)
    assert "\x1b[" in colored  # the control: a terminal gets color
    after = _on_a_terminal(["doctor", "--replay", str(record), "--no-color"], env)
    before = _on_a_terminal(["--no-color", "doctor", "--replay", str(record)], env)
    assert "\x1b[" not in after and after == before
    assert after.splitlines()[0] == colored.splitlines()[0].replace("\x1b[32m", "").replace(
        "\x1b[31m", ""
    ).replace("\x1b[33m", "").replace("\x1b[0m", "").replace("\x1b[1m", "")
    env["NO_COLOR"] = "1"  # no-color.org's variable, as before
    assert "\x1b[" not in _on_a_terminal(["doctor", "--replay", str(record)], env)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_takes_the_group_flags_after_its_name(run_cli, command) -> None:
    """A command added later gets them too (cli.py adds them where it loads a command)."""
    code, out, err = run_cli([command, "--no-color", "--debug", "--offline", "--help"])
    assert code == 0, err
    for flag in GLOBAL_FLAGS:
        assert flag in out


def test_debug_after_the_command_shows_the_traceback_and_keeps_the_exit_code(
    run_cli, tmp_path
) -> None:
    code, _, err = run_cli(["lock", "nosuch", "--dir", str(tmp_path)])
    assert code == 2 and "Traceback" not in err and "no environment.yml" in err
    code, _, err = run_cli(["lock", "nosuch", "--dir", str(tmp_path), "--debug"])
    assert code == 2 and "Traceback (most recent call last)" in err


def test_offline_after_the_command_beats_the_project_file(run_cli, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("ENVTOOL_OFFLINE", raising=False)
    (tmp_path / "envtool.toml").write_text("offline = false\n")
    code, out, _ = run_cli(["config", "--json"], tmp_path)
    row = {r["key"]: r for r in json.loads(out)["settings"]}["offline"]
    assert code == 0 and row["value"] == "0" and row["source"].endswith("envtool.toml")
    assert "ENVTOOL_OFFLINE" not in os.environ  # what the run applied from the file ended with it
    code, out, _ = run_cli(["config", "--json", "--offline"], tmp_path)
    row = {r["key"]: r for r in json.loads(out)["settings"]}["offline"]
    assert code == 0 and row == {**row, "value": "1", "source": "flag --offline"}


def test_config_shows_what_a_default_is_here(run_cli, tmp_path, monkeypatch) -> None:
    """It printed `(default)`: the user still did not know where envs and the cache go."""
    monkeypatch.delenv("ENVTOOL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    code, out, _ = run_cli(["config"], tmp_path)
    assert code == 0 and "(default)" not in out
    assert f"cache-dir = {tmp_path / 'xdg' / 'envtool'}  [default]" in out


@pytest.mark.integration
def test_a_flag_after_runs_command_is_the_programs_not_envtools(tmp_path, env) -> None:
    """`envtool run` stops reading its own options at the program: `--debug` there is the
    program's argument."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    out = subprocess.run(
        [sys.executable, "-m", "envtool", "run", "--prefix", str(venv), "--no-color",
         "python", "-c", "import sys; print(sys.argv[1:])", "--debug", "--no-color"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['--debug', '--no-color']"
    assert Path(venv).is_dir()


def test_a_programs_debug_flag_is_not_envtools(run_cli, tmp_path) -> None:
    """`--debug` after run's program is the program's: an envtool error there stays one line;
    envtool's own --debug (before or after `run`) still shows the traceback."""
    gone = str(tmp_path / "gone")
    code, _, err = run_cli(["run", "--prefix", gone, "python", "x.py", "--debug"])
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for args in (["--debug", "run", "--prefix", gone], ["run", "--debug", "--prefix", gone]):
        code, _, err = run_cli([*args, "python", "x.py"])
        assert code == 2 and "Traceback (most recent call last)" in err, args


def test_debug_reaches_a_settings_file_error_before_the_command(run_cli, tmp_path) -> None:
    """The group reads envtool.toml before the command's options: --debug after the command
    name still asks for the traceback of its error."""
    (tmp_path / "envtool.toml").write_text("no-such-key = 1\n")
    code, _, err = run_cli(["config", "--debug"], tmp_path)
    assert code == 2 and "Traceback (most recent call last)" in err and "no-such-key" in err
    code, _, err = run_cli(["config"], tmp_path)
    assert code == 2 and "Traceback" not in err and "no-such-key" in err


def test_a_programs_json_flag_is_not_envtools(run_cli, tmp_path) -> None:
    """`--json` after run's program is the program's: envtool's error stays a line on stderr with
    nothing on stdout (the program's output stream); a command's own --json still gets the
    envelope, after the command name or after its arguments."""
    gone = str(tmp_path / "gone")
    code, out, err = run_cli(["run", "--prefix", gone, "python", "x.py", "--json"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (out, err)
    for args in (["lock", "--json", "nosuch"], ["lock", "nosuch", "--json"]):
        code, out, _ = run_cli([*args, "--dir", str(tmp_path)])
        envelope = json.loads(out)
        assert (
            code == envelope["exit_code"] == 2
            and "no environment.yml" in envelope["error"]["message"]
        )
