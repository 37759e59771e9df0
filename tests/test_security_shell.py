"""Every generated shell text, run with hostile values by real shells: activation (shell-hook,
`run`), the Slurm job script, printed hints; plus the pip requirements writer, terminal escapes
and writes that must not replace device nodes or follow planted links.

Each hostile value is a command that would leave a file behind (PWNED*) if it ran; the tests
assert that no such file appears and that the value arrives byte-exact.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_envtool

# names that pass the env-name rule (no spaces, '/', ':' or '#') but are shell code
HOSTILE_NAMES = [
    "a$(touch${IFS}PWNED_name)b",
    "`touch${IFS}PWNED_tick`",
    'it\'s"q"',
    "x;touch${IFS}PWNED_semi",
    "$(touch${IFS}PWNED_2)'\"`touch${IFS}PWNED_3`$HOME%PATH%",
]
# prefixes (--prefix) with what a name cannot hold: spaces, newlines
HOSTILE_DIRS = [
    'it\'s "q" $(touch PWNED_d)',
    "x;rm -rf y",
    "nl\n$(touch PWNED_nl)\nz",
    "back\\slash\\' $(touch PWNED_bs)",
]
STATE_VARS = {
    "EVIL": "$(touch PWNED_state)`touch PWNED_state2`'\"\\ ${HOME} %PATH% $env:PATH",
    "MULTI": "line1\nline2\n",
    "EMPTY": "",
}


def make_env(prefix: Path, env_vars: dict[str, str] | None = None) -> Path:
    """A minimal conda prefix: conda-meta/history, a state file, one activate.d hook per shell."""
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta" / "history").write_text("")
    (prefix / "bin").mkdir()
    state = {"env_vars": STATE_VARS if env_vars is None else env_vars}
    (prefix / "conda-meta" / "state").write_text(json.dumps(state))
    hooks = prefix / "etc" / "conda" / "activate.d"
    hooks.mkdir(parents=True)
    (hooks / "z.sh").write_text('export HOOK_SAW="$CONDA_PREFIX"\n')
    (hooks / "z.fish").write_text("set -gx HOOK_SAW $CONDA_PREFIX\n")
    (hooks / "z.ps1").write_text("$env:HOOK_SAW = $env:CONDA_PREFIX\n")
    return prefix


def pwned(*roots: Path) -> list[str]:
    return [str(p) for r in roots for p in r.rglob("PWNED*")]


def base_env(tmp_path: Path) -> dict[str, str]:
    e = dict(os.environ)
    e.update(ENVTOOL_ENVS_DIR=str(tmp_path / "envs"), ENVTOOL_CACHE_DIR=str(tmp_path / "cache"))
    for var in ("CONDA_PREFIX", "CONDA_SHLVL", "CONDA_DEFAULT_ENV", "ENVTOOL_TEST_PAUSE_AT"):
        e.pop(var, None)
    return e


# a program that prints the variables activation sets, as JSON, whatever shell ran it
DUMP = [
    sys.executable,
    "-c",
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
    "('PATH', 'CONDA_PREFIX', 'CONDA_SHLVL', 'CONDA_DEFAULT_ENV', 'HOOK_SAW', "
    "'EVIL', 'MULTI', 'EMPTY')}))",
]

SHELL_ARGV = {
    "bash": ["bash", "--noprofile", "--norc", "-c"],
    "sh": ["dash", "-c"],
    "zsh": ["zsh", "-f", "-c"],
    "fish": ["fish", "--no-config", "-c"],
    "powershell": ["pwsh", "-NoProfile", "-NonInteractive", "-Command"],
}


def eval_hook(shell: str, hook: str, env: dict[str, str], cwd: Path) -> dict[str, str | None]:
    """Evaluate the hook text in a real `shell` and return what DUMP saw."""
    if shutil.which(SHELL_ARGV[shell][0]) is None:
        pytest.skip(f"{SHELL_ARGV[shell][0]} is not installed")
    if shell == "powershell":
        call = "& " + " ".join("'" + a.replace("'", "''") + "'" for a in DUMP)
        script = hook + "\n" + call + "\n"
    else:
        call = " ".join("'" + a.replace("'", "'\\''") + "'" for a in DUMP)
        if shell == "fish":
            call = " ".join("'" + a.replace("\\", "\\\\").replace("'", "\\'") + "'" for a in DUMP)
        script = hook + "\n" + call + "\n"
    proc = subprocess.run(
        [*SHELL_ARGV[shell], script], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, (shell, proc.stderr, hook)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_activated(seen: dict[str, str | None], prefix: Path, caller_path: str) -> None:
    assert seen["CONDA_PREFIX"] == str(prefix)
    assert seen["HOOK_SAW"] == str(prefix)  # the activate.d hook ran after CONDA_PREFIX was set
    assert seen["CONDA_SHLVL"] == "1"
    assert seen["CONDA_DEFAULT_ENV"] == prefix.name
    assert seen["PATH"] == str(prefix / "bin") + os.pathsep + caller_path
    for k, v in STATE_VARS.items():
        assert seen[k] == v, k


@pytest.mark.parametrize("shell", ["bash", "sh", "zsh", "fish", "powershell"])
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_shell_hook_of_a_hostile_name_runs_nothing(shell: str, name: str, tmp_path: Path) -> None:
    env = base_env(tmp_path)
    prefix = make_env(tmp_path / "envs" / name)
    work = tmp_path / "work"
    work.mkdir()
    out = run_envtool("shell-hook", name, "--shell", shell, env=env, cwd=work)
    assert out.returncode == 0, out.stderr
    seen = eval_hook(shell, out.stdout, env, work)
    check_activated(seen, prefix, env["PATH"])
    assert pwned(tmp_path) == []


@pytest.mark.parametrize("shell", ["bash", "sh", "zsh", "fish", "powershell"])
@pytest.mark.parametrize("folder", HOSTILE_DIRS)
def test_shell_hook_of_a_hostile_prefix_runs_nothing(
    shell: str, folder: str, tmp_path: Path
) -> None:
    env = base_env(tmp_path)
    prefix = make_env(tmp_path / folder)
    work = tmp_path / "work"
    work.mkdir()
    out = run_envtool("shell-hook", "--prefix", str(prefix), "--shell", shell, env=env, cwd=work)
    assert out.returncode == 0, out.stderr
    check_activated(eval_hook(shell, out.stdout, env, work), prefix, env["PATH"])
    assert pwned(tmp_path) == []


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_run_of_a_hostile_name_runs_nothing(name: str, tmp_path: Path) -> None:
    env = base_env(tmp_path)
    prefix = make_env(tmp_path / "envs" / name)
    work = tmp_path / "work"
    work.mkdir()
    out = run_envtool("run", "-n", name, "--", *DUMP, env=env, cwd=work)
    assert out.returncode == 0, out.stderr
    check_activated(json.loads(out.stdout), prefix, env["PATH"])
    assert pwned(tmp_path) == []


def test_run_under_a_hostile_conda_root_runs_nothing(tmp_path: Path) -> None:
    """envs_dir() is $CONDA_ROOT/envs when no ENVTOOL_ENVS_DIR is set: the root is a value too."""
    env = base_env(tmp_path)
    root = tmp_path / "r$(touch PWNED_root)`touch PWNED_root2`'\""
    env.pop("ENVTOOL_ENVS_DIR")
    for var in ("ENVTOOL_CONDA_ROOT", "MAMBA_ROOT_PREFIX", "CONDA_EXE"):
        env.pop(var, None)
    env["CONDA_ROOT"] = str(root)
    prefix = make_env(root / "envs" / "demo")
    work = tmp_path / "work"
    work.mkdir()
    out = run_envtool("run", "-n", "demo", "--", *DUMP, env=env, cwd=work)
    assert out.returncode == 0, out.stderr
    check_activated(json.loads(out.stdout), prefix, env["PATH"])
    hook = run_envtool("shell-hook", "demo", env=env, cwd=work)
    check_activated(eval_hook("bash", hook.stdout, env, work), prefix, env["PATH"])
    assert pwned(tmp_path) == []


@pytest.mark.parametrize(
    "env_vars",
    [
        {"A;touch PWNED_v": "x"},
        {"$(touch PWNED_v)": "x"},
        {"A B": "x"},
        {"1A": "x"},
        {"": "x"},
        {"A\nB": "x"},
        {"OK": 5},
        {"OK": "nul\u0000"},
    ],
)
@pytest.mark.parametrize("command", ["shell-hook", "run"])
def test_state_env_var_names_must_be_identifiers(
    env_vars: dict[str, object], command: str, tmp_path: Path
) -> None:
    env = base_env(tmp_path)
    make_env(tmp_path / "envs" / "demo", env_vars)  # type: ignore[arg-type]
    args = ["shell-hook", "demo"] if command == "shell-hook" else ["run", "-n", "demo", "true"]
    out = run_envtool(*args, env=env, cwd=tmp_path)
    assert out.returncode == 2, out
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "conda-meta/state" in lines[0] and "Traceback" not in out.stderr
    assert pwned(tmp_path) == []


def test_empty_caller_path_does_not_add_the_current_directory(tmp_path: Path) -> None:
    """`export PATH=/p/bin:"$PATH"` under an empty PATH would end in ':' (= the cwd)."""
    prefix = make_env(tmp_path / "p", {})
    from envtool.adapters.activation import render_activation_script

    hook = render_activation_script(prefix, "bash")
    proc = subprocess.run(
        ["/bin/bash", "--norc", "-c", 'PATH=""; eval "$1"; printf %s "$PATH"', "x", hook],
        capture_output=True,
        text=True,
    )
    assert proc.stdout == str(prefix / "bin")
