"""Issue 21 item 7: the small things a new user trips on in the first ten minutes, each held."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO


def test_create_gpus_n_explains_gpu_cc_and_launch_gpus(run_cli, tmp_path) -> None:
    code, out, err = run_cli(["create", "x", "--gpus", "2"], tmp_path)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "envtool: error: create --gpus 2: create plans for GPU architectures, not a GPU count"
        " — name the GPU's compute capability with --gpu CC (e.g. --gpu 8.0; --cuda auto reads"
        " this host's); how many GPUs to train on is `envtool launch train.py --gpus N`"
    ]
    assert not (tmp_path / "environments").exists()


@pytest.mark.parametrize("flag", ["--nproc-per-node", "--nproc_per_node", "--gpus"])
def test_launch_takes_torchruns_nproc_per_node(flag, run_cli, tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code, out, err = run_cli(
        ["launch", str(script), flag, "3", "--cpu", "--dry-run", "--json"], tmp_path
    )
    assert code == 0, err
    assert json.loads(out)["plan"]["nproc_per_node"] == 3


def test_launch_takes_torchruns_underscore_spellings(run_cli, tmp_path) -> None:
    """torchrun reads --max_restarts as --max-restarts (each of its flags both ways); envtool
    said "No such option: --max_restarts"."""
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    args = ["--max_restarts", "2", "--nnodes", "2", "--node_rank", "1"]
    args += ["--rdzv_endpoint", "10.0.0.1:29400", "--rdzv_id", "job7", "--local_addr", "10.0.0.2"]
    code, out, err = run_cli(
        ["launch", str(script), *args, "--cpu", "--dry-run", "--json"], tmp_path
    )
    assert code == 0, err
    argv = json.loads(out)["plan"]["argv"]
    pairs = (("--max-restarts", "2"), ("--node-rank", "1"), ("--local-addr", "10.0.0.2"))
    pairs += (("--master-addr", "10.0.0.1"), ("--master-port", "29400"))
    for flag, value in pairs:
        assert argv[argv.index(flag) + 1] == value, argv


def test_launch_takes_torchruns_standalone_and_says_where_script_options_go(
    run_cli, tmp_path
) -> None:
    """torchrun habits: `--standalone`, and the script's own options right after the script
    (torchrun passes those on; envtool takes its options on both sides, so they go after --)."""
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code, out, err = run_cli(
        ["launch", "--standalone", "--nproc-per-node=2", "--cpu", str(script), "--dry-run"],
        tmp_path,
    )
    assert code == 0, err
    code, out, err = run_cli(["launch", str(script), "--max-steps", "5"], tmp_path)
    assert code == 2 and "No such option '--max-steps'" in err
    assert "put it after `--`: envtool launch train.py --gpus 4 -- --max-steps" in err
    code, out, err = run_cli(
        ["launch", "--standalone", "--nnodes", "2", "--cpu", str(script)], tmp_path
    )
    assert code == 2 and "--standalone runs one node" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["doctor", "--json", "--bogus"], "No such option '--bogus'"),
        (["launch", "--json"], "Missing argument 'SCRIPT'"),
        (["info", "--json", "a", "b"], "Got unexpected extra argument (b)"),
    ],
)
def test_a_usage_error_under_json_is_the_envelope(argv, message, run_cli, tmp_path) -> None:
    code, out, err = run_cli(argv, tmp_path)
    assert code == 2
    doc = json.loads(out)  # one object on stdout, as for every other error
    assert doc["version"] == 1 and doc["command"] == argv[0] and doc["exit_code"] == 2
    assert message in doc["error"]["message"]
    assert doc["error"]["hint"] == f"see `envtool {argv[0]} --help`"
    assert message in err  # and the usual lines on stderr


def test_name_and_dash_n_are_one_name(run_cli, tmp_path) -> None:
    code, _, err = run_cli(["doctor", "a", "-n", "b", "--fast"], tmp_path)
    assert code == 2 and "NAME 'a' and -n 'b' disagree" in err
    code, _, err = run_cli(["verify", "-n", "ghost"], tmp_path)
    assert code == 2 and "no environment named 'ghost'" in err


@pytest.mark.integration
def test_info_before_install_reads_the_lock(harvested, run_cli, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ENVTOOL_ENVS_DIR", str(tmp_path / "envs"))
    conda_forge = str(harvested / "conda-forge")
    code, _, err = run_cli(
        ["create", "c", "--no-install", "--cuda", "cpu", "--channel", conda_forge], tmp_path
    )
    assert code == 0, err
    code, out, err = run_cli(["info", "c", "--json"], tmp_path)
    assert code == 0, err
    row = json.loads(out)
    assert row["state"] == "not installed" and row["flavor"] == "conda-forge"
    assert row["torch"].startswith("2.") and "cpu" in row["torch"]
    assert row["install_command"] == "envtool install c"
    assert err.splitlines() == [
        f"envtool info: c is not installed; showing its lock {tmp_path / 'environments' / 'c' / 'conda-lock.yml'}"
    ]


@pytest.mark.integration
def test_bash_completion_script_is_produced() -> None:
    """docs/shell-completion.md's line: click's completion for the `envtool` entry point."""
    env = {**os.environ, "_ENVTOOL_COMPLETE": "bash_source"}
    out = subprocess.run(
        [str(REPO / ".venv" / "bin" / "envtool")]
        if (REPO / ".venv" / "bin" / "envtool").exists()
        else [sys.executable, "-m", "envtool"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert (
        "_envtool_completion()" in out.stdout
        and "complete -o nosort -F _envtool_completion envtool" in out.stdout
    )
    # and it completes: the commands for `envtool d<TAB>`
    env.update(_ENVTOOL_COMPLETE="bash_complete", COMP_WORDS="envtool d", COMP_CWORD="1")
    out = subprocess.run(
        [str(REPO / ".venv" / "bin" / "envtool")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "plain,doctor" in out.stdout.splitlines(), out.stdout


class _Stream:
    """A stream with an encoding and a tty answer, as sys.stdout has."""

    def __init__(self, encoding: str = "utf-8", tty: bool = False) -> None:
        self.encoding, self.tty, self.parts = encoding, tty, []

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> None:
        text.encode(self.encoding)  # what a real stream of this encoding would refuse
        self.parts.append(text)


VERDICT = "envtool doctor: FAIL — torch 2.7 → CUDA 12.8 needs driver ≥ 570… ✗"


def test_color_on_a_terminal_only_and_never_with_no_color(monkeypatch) -> None:
    from envtool import output

    monkeypatch.delenv("NO_COLOR", raising=False)
    tty = _Stream(tty=True)
    output.write_line(tty, VERDICT)
    assert tty.parts == [VERDICT.replace("FAIL", "\x1b[31mFAIL\x1b[0m") + "\n"]
    pipe = _Stream(tty=False)
    output.write_line(pipe, VERDICT)
    assert pipe.parts == [VERDICT + "\n"]
    monkeypatch.setenv("NO_COLOR", "1")
    tty = _Stream(tty=True)
    output.write_line(tty, VERDICT)
    assert "\x1b" not in tty.parts[0]
    # data never drives the terminal: an ESC in a value stays escaped, color or not
    monkeypatch.delenv("NO_COLOR")
    tty = _Stream(tty=True)
    output.write_line(tty, "  ✓ gpu: name \x1b]0;owned\x07")
    assert tty.parts == ["  \x1b[32m✓\x1b[0m gpu: name \\x1b]0;owned\\x07\n"]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_locale_that_is_not_utf8_gets_ascii_arrows_ticks_and_ellipses(encoding) -> None:
    from envtool import output

    stream = _Stream(encoding)
    output.write_line(stream, VERDICT + " naïve")
    expected_tail = "naïve" if encoding == "latin-1" else "na?ve"
    assert stream.parts == [
        f"envtool doctor: FAIL - torch 2.7 -> CUDA 12.8 needs driver >= 570... X {expected_tail}\n"
    ]


@pytest.mark.integration
def test_no_color_flag_and_an_ascii_locale_end_to_end(tmp_path) -> None:
    """`PYTHONIOENCODING=ascii` (a C/POSIX locale without UTF-8): doctor prints, in ASCII."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    out = subprocess.run(
        [sys.executable, "-m", "envtool", "--no-color", "doctor", "--fast", "-v"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.isascii() and out.stderr.isascii()
    assert out.stdout.startswith(b"envtool doctor: OK - ")


@pytest.mark.integration
def test_a_local_channel_is_written_as_given_relative_to_the_project(
    harvested, run_cli, tmp_path
) -> None:
    """`--channel ./chan` inside the project: environment.yml says ./chan (the project can move
    or be cloned with its channel), and `envtool lock` from the project finds it again; a
    channel outside the project is recorded absolute, a URL or a name as given."""
    import shutil

    shutil.copytree(harvested / "conda-forge", tmp_path / "chan")
    code, _, err = run_cli(
        ["create", "c", "--no-install", "--cuda", "cpu", "--channel", "chan"], tmp_path
    )
    assert code == 0, err
    yml = (tmp_path / "environments" / "c" / "environment.yml").read_text()
    assert "channels:\n  - ./chan\n" in yml and str(tmp_path) not in yml
    moved = tmp_path.parent / (tmp_path.name + "-moved")
    shutil.move(tmp_path, moved)  # a clone elsewhere: the relative channel moves with it
    try:
        code, out, err = run_cli(["lock", "c", "--force"], moved)
        assert code == 0, err
        assert "wrote environments/c/conda-lock.yml" in out
    finally:
        shutil.move(moved, tmp_path)


def test_written_channel_keeps_names_urls_and_outside_paths(tmp_path, monkeypatch) -> None:
    from envtool.adapters.locate import written_channel

    (tmp_path / "proj" / "ch").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    monkeypatch.chdir(tmp_path / "proj")
    assert written_channel("conda-forge") == "conda-forge"
    assert written_channel("https://example.org/ch/") == "https://example.org/ch/"
    assert written_channel("~/ch") == "~/ch"
    assert written_channel("./ch") == written_channel("ch") == "./ch"
    assert written_channel("../outside") == str((tmp_path / "outside").resolve())
    # --dir: relative to that project when the folder is inside it (lock reads it from there)
    assert written_channel("ch", str(tmp_path)) == "./proj/ch"
    assert written_channel("ch", str(tmp_path / "outside")) == str((tmp_path / "proj/ch").resolve())


def test_remove_of_a_package_name_says_remove_deletes_whole_envs(
    run_cli, tmp_path, monkeypatch
) -> None:
    """pixi and uv users type `remove PKG` to drop a dependency: envtool's remove deletes an
    environment, and says so instead of a bare "no environment"."""
    monkeypatch.setenv("ENVTOOL_ENVS_DIR", str(tmp_path / "envs"))
    code, _, err = run_cli(["remove", "torchvision", "--yes"], tmp_path)
    assert code == 2
    assert "remove deletes a whole environment (conda env remove), not a package" in err


def test_no_hint_contradicts_the_flags_given(run_cli, tmp_path) -> None:
    """ "give NAME" when NAME was given, "create it" when only the install is missing: each
    message fits what was typed."""
    folder = tmp_path / "environments" / "e"
    folder.mkdir(parents=True)
    (folder / "conda-lock.yml").write_text("version: 1\n")
    code, _, err = run_cli(["lock", "e"], tmp_path)  # the lock is here, its request is not
    assert code == 2 and "`envtool install e` installs the lock as it is" in err
    assert "envtool create" not in err
    code, _, err = run_cli(["export", "e", "--variant", "cpu", "--lock", "x.yml"], tmp_path)
    assert code == 2 and "--variant cpu and --lock x.yml both pick the lock" in err
    code, _, err = run_cli(["export", "--variant", "cpu"], tmp_path)
    assert code == 2 and "give NAME as well" in err


def test_shell_hook_speaks_the_login_shell_and_conda_short_flags_work(
    run_cli, tmp_path, monkeypatch
) -> None:
    """pixi's shell-hook follows $SHELL; conda users type -p PREFIX and -c CHANNEL."""
    from envtool.commands.shell_hook import login_shell

    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta" / "history").write_text("")
    monkeypatch.setenv("SHELL", "/usr/bin/fish")
    code, out, err = run_cli(["shell-hook", "-p", str(prefix)], tmp_path)
    assert code == 0, err
    assert "set -gx CONDA_PREFIX" in out
    for shell, expected in (
        ("/bin/zsh", "zsh"),
        ("/opt/pwsh", "powershell"),
        ("/bin/tcsh", "bash"),
    ):
        monkeypatch.setenv("SHELL", shell)
        assert login_shell() == expected
    monkeypatch.delenv("SHELL")
    assert login_shell() == "bash"
    code, out, err = run_cli(["shell-hook", "-p", str(prefix), "--shell", "bash"], tmp_path)
    assert code == 0 and "export CONDA_PREFIX=" in out
    code, out, err = run_cli(
        ["create", "x", "-c", str(tmp_path / "nochannel"), "--dry-run", "--cuda", "cpu"], tmp_path
    )
    assert "No such option" not in err


def test_create_f_without_name_takes_the_files_name_as_conda_does(
    run_cli, tmp_path, harvested
) -> None:
    (tmp_path / "env.yml").write_text("name: fromfile\ndependencies:\n  - python\n")
    channel = ["--channel", str(harvested / "conda-forge"), "--cuda", "cpu", "--dry-run"]
    code, out, err = run_cli(["create", "-f", "env.yml", *channel, "--json"], tmp_path)
    assert code == 0, err
    assert "solving fromfile" in err
    (tmp_path / "nameless.yml").write_text("dependencies:\n  - python\n")
    code, _, err = run_cli(["create", "-f", "nameless.yml", *channel], tmp_path)
    assert code == 2 and "has no `name:` and no NAME was given" in err
    code, _, err = run_cli(["create", "--cuda", "cpu"], tmp_path)
    assert code == 2 and "no environment NAME given" in err


def test_shell_hook_on_a_venv_says_how_a_venv_activates(run_cli, tmp_path) -> None:
    """`shell-hook -p VENV` said "no environment at VENV — … or pass --prefix PATH", to a user
    who had passed --prefix."""
    import venv

    venv.create(tmp_path / "my venv", with_pip=False)
    code, out, err = run_cli(["shell-hook", "-p", str(tmp_path / "my venv")], tmp_path)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"envtool: error: {tmp_path / 'my venv'} is a venv, not a conda environment — activate "
        f"it with `source '{tmp_path / 'my venv' / 'bin' / 'activate'}'` (fish: activate.fish)"
    ]
    code, _, err = run_cli(["shell-hook", "-p", str(tmp_path)], tmp_path)  # neither
    assert code == 2 and err.rstrip().endswith(f"no environment at {tmp_path} — see `envtool list`")


def test_run_calls_only_an_environment_an_environment(run_cli, tmp_path, monkeypatch) -> None:
    """`run /tmp/plain python` (a folder, no `--`) was told "/tmp/plain is an environment" with a
    command that then failed; a conda env or a venv is one, a plain folder is not."""
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    (tmp_path / "plain").mkdir()
    code, _, err = run_cli(["run", str(tmp_path / "plain"), "python"], tmp_path)
    assert code == 2 and "is an environment" not in err, err
    (tmp_path / "env" / "conda-meta").mkdir(parents=True)
    (tmp_path / "env" / "conda-meta" / "history").write_text("")
    code, _, err = run_cli(["run", str(tmp_path / "env"), "python"], tmp_path)
    assert code == 2 and f"{tmp_path / 'env'} is an environment — envtool run " in err, err
