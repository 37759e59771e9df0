"""Every generated shell text, run with hostile values by real shells: activation (shell-hook,
`run`), the Slurm job script, printed hints; terminal escapes and writes that must not replace
device nodes or follow planted links (the pip requirements writer: test_safe_primitives).

Each hostile value is a command that would leave a file behind (PWNED*) if it ran; the tests
assert that no such file appears and that the value arrives byte-exact.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_envtool

pytestmark = pytest.mark.integration  # every test runs real shells or envtool subprocesses

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
    "esc\x1b]0;pwned\x07\x1b[2J\x9b31m$(touch PWNED_esc)",
]
STATE_VARS = {
    "EVIL": "$(touch PWNED_state)`touch PWNED_state2`'\"\\ ${HOME} %PATH% $env:PATH",
    "MULTI": "line1\nline2\n",
    "TERM_ESC": "\x1b]0;pwned\x07\x1b[2J\x9b31m\x7f\ttab",
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
    "'EVIL', 'MULTI', 'EMPTY', 'TERM_ESC')}))",
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
    assert no_control(out.stdout)  # safe to print as well as to eval
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
    assert no_control(out.stdout)
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
    from envtool.adapters.launch.activation import render_activation_script

    hook = render_activation_script(prefix, "bash")
    proc = subprocess.run(
        ["/bin/bash", "--norc", "-c", 'PATH=""; eval "$1"; printf %s "$PATH"', "x", hook],
        capture_output=True,
        text=True,
    )
    assert proc.stdout == str(prefix / "bin")


# --- Slurm: the batch script -------------------------------------------------------------

HOSTILE_ARGS = [
    "$(touch PWNED_a1)",
    "`touch PWNED_a2`",
    "'; touch PWNED_a3; '",
    '"; touch PWNED_a4; "',
    "$SLURM_NODEID",
    "${HOME}",
    "a\nb",
    "\\",
    "",
    "--lr=0.1 x",
    "*",
]


def _stub(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)


def test_sbatch_passes_hostile_args_and_paths_byte_exact(tmp_path: Path) -> None:
    """Render the job script through the CLI, run it with bash and stub srun/scontrol/python:
    the launcher's argv arrives as given and nothing in it runs."""
    env = base_env(tmp_path)
    prefix = make_env(tmp_path / "env $(touch PWNED_p)'\"`touch PWNED_p2`")
    seen = tmp_path / "argv.json"
    _stub(
        prefix / "bin" / "python",
        "import json, os, sys\n"
        f"open({str(seen)!r}, 'w').write(json.dumps("
        "{'argv': sys.argv[1:], 'EVIL': os.environ.get('EVIL'), "
        "'PREFIX': os.environ.get('CONDA_PREFIX')}))\n",
    )
    script = tmp_path / "s $(touch PWNED_s)`touch PWNED_s2`'\";x.py"
    script.write_text("print('hi')\n")
    stubs = tmp_path / "stubs"
    # srun: drop its own options, run the task command; scontrol: the node list
    _stub(
        stubs / "srun",
        "import os, sys\nargs = sys.argv[1:]\n"
        "while args[0].startswith('--'):\n    args.pop(0)\n"
        "os.execvp(args[0], args)\n",
    )
    _stub(stubs / "scontrol", "print('node1')\n")
    run_root = tmp_path / "runs $(touch PWNED_r);x"
    out = run_envtool(
        "launch", str(script), "--slurm", "--cpu", "--nodes", "1",
        "--prefix", str(prefix), "--run-dir", str(run_root), "--dry-run", "--json",
        "--", *HOSTILE_ARGS,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = json.loads(out.stdout)["script"]
    job_env = {
        **env,
        "PATH": f"{stubs}{os.pathsep}{env['PATH']}",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_NNODES": "1",
        "SLURM_NODEID": "0",
    }
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-s"],
        input=text,
        env=job_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(seen.read_text())
    run_dir = next(run_root.iterdir())  # mkdir -p of the run dir ran, with its exact name
    assert got["argv"] == [
        "-m", "torch.distributed.run",
        "--nnodes", "1", "--node-rank", "0",
        "--rdzv-endpoint", "node1:20042", "--rdzv-id", "42",
        "--log-dir", f"{run_dir}/torchrun/node-0",
        "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--max-restarts", "0",
        "--tee", "3", "--local-ranks-filter", "0",
        str(script), *HOSTILE_ARGS,
    ]  # fmt: skip
    assert got["EVIL"] == STATE_VARS["EVIL"] and got["PREFIX"] == str(prefix)
    assert pwned(tmp_path) == []


@pytest.mark.parametrize(
    "option",
    [
        ["--job-name", "x\n$(touch PWNED_j)"],
        ["--job-name", "a b"],
        ["--partition", "gpu\n#SBATCH --uid=0"],
        ["--account", "a'b"],
        ["--run-dir", "r'\n$(touch PWNED_rd)"],
    ],
)
def test_values_that_cannot_go_in_an_sbatch_line_are_refused(
    option: list[str], tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    out = run_envtool(
        "launch", str(script), "--slurm", "--cpu", "--nodes", "1", *option,
        env=base_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert option[0] in out.stderr
    assert not list(tmp_path.rglob("job.sbatch")) and pwned(tmp_path) == []


def test_a_hostile_script_name_gives_a_plain_job_name(tmp_path: Path) -> None:
    script = tmp_path / "t $(touch PWNED_n)\n#SBATCH --uid=0.py"
    script.write_text("")
    out = run_envtool(
        "launch", str(script), "--slurm", "--cpu", "--nodes", "1", "--dry-run", "--json",
        env=base_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = json.loads(out.stdout)["script"]
    # sbatch reads #SBATCH lines up to the first command; a quoted word with a newline
    # further down (the script path) is not a directive
    header = text.split("\nexport ", 1)[0]
    assert "\nset " not in header and "\nsrun" not in header
    directives = [ln for ln in header.splitlines() if ln.startswith("#SBATCH")]
    names = [ln for ln in directives if ln.startswith("#SBATCH --job-name=")]
    assert len(names) == 1 and re.fullmatch(r"#SBATCH --job-name=[A-Za-z0-9._+-]+", names[0])
    assert not any(ln.startswith("#SBATCH --uid") for ln in directives)
    assert pwned(tmp_path) == []


# --- printed hints: every command line that names a value is pasteable -----------------------


def shell_words(command_line: str) -> list[str]:
    """The words bash makes of a printed command line (nothing in it may run)."""
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", "printf '%s\\0' " + command_line],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("\0")[:-1]


def backticked(text: str, start: str) -> list[str]:
    return [m for m in re.findall(r"`([^`]*)`", text) if m.startswith(start)]


def test_init_run_it_hints_quote_the_path(tmp_path: Path) -> None:
    dest = tmp_path / "x $(touch PWNED_i)'`touch PWNED_i2`\";y.py"
    out = run_envtool("init", str(dest), env=base_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    hints = [ln for ln in out.stdout.splitlines() if ln.startswith("  ")]
    words = [shell_words(h) for h in hints]
    assert [w[0] for w in words] == ["python", "torchrun", "envtool"], out.stdout
    assert all(str(dest) in w for w in words)  # the path is one word, byte-exact
    assert pwned(tmp_path) == []


# no backtick: the hints sit between backticks in the message (backticks: see the hooks above)
NAME = "n$(touch${IFS}PWNED_h)';x\"$HOME|y&"


@pytest.mark.parametrize(
    "args",
    [["lock", NAME, "--check"], ["export", NAME], ["install", NAME], ["doctor", NAME]],
)
def test_error_hints_quote_the_env_name(args: list[str], tmp_path: Path) -> None:
    env = {**base_env(tmp_path), "ENVTOOL_DRIVER_VERSION": "570.86.10"}
    out = run_envtool(*args, env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    hints = backticked(out.stderr, "envtool ")
    assert hints, out.stderr
    for hint in hints:
        assert NAME in shell_words(hint), hint
    assert pwned(tmp_path) == []


def test_doctor_fixes_quote_the_env_name() -> None:
    from envtool.core.checks import check_torch_present
    from envtool.core.facts import EnvFacts, HostFacts

    check = check_torch_present(
        HostFacts(), EnvFacts(name=NAME, prefix="/p", status="no-python", python_exe="/p/python")
    )
    (hint,) = backticked(check.fix or "", "envtool create")
    assert shell_words(hint) == ["envtool", "create", NAME, "--cuda", "auto"]


# --- pip requirements: one checked line per lock entry ----------------------------------------


@pytest.fixture
def stray(tmp_path: Path) -> tuple[Path, str]:
    import channel_builder as cb

    wheel = cb.build_wheel(tmp_path / "stray", name="stray_pkg", version="6.6")
    return wheel, hashlib.sha256(wheel.read_bytes()).hexdigest()


def _injections(stray: tuple[Path, str]) -> dict[str, dict]:
    wheel, sha = stray
    extra = f"stray_pkg @ {wheel.as_uri()} --hash=sha256:{sha}"
    return {
        "name": {"name": f"envtool-demo\n{extra}"},
        "url": {"url": None},  # filled in by the test: the real URL + "\n" + extra
        "sha256": {"hash": {"sha256": "0" * 64 + "\n" + extra}},
        "version": {"version": f"0.1.0\n{extra}"},
        "url-option": {"url": None},  # the real URL + " --index-url http://evil"
    }


@pytest.mark.parametrize("field", ["name", "url", "sha256", "version", "url-option"])
def test_a_lock_pip_entry_cannot_add_requirement_lines(
    field: str, setup, stray: tuple[Path, str], tmp_path: Path
) -> None:
    import channel_builder as cb
    import yaml

    edits = _injections(stray)[field]
    if "url" in edits:
        entry = next(
            e for e in yaml.safe_load(setup.lock.read_text())["package"] if e["manager"] == "pip"
        )
        wheel, sha = stray
        tail = (
            f"\nstray_pkg @ {wheel.as_uri()} --hash=sha256:{sha}"
            if field == "url"
            else " --index-url http://127.0.0.1:9/simple"
        )
        edits = {"url": entry["url"] + tail}
    lock = cb.edit_lock(setup.lock, tmp_path / "p" / "conda-lock.yml", {"envtool-demo": edits})
    prefix = tmp_path / "env"
    env = {**base_env(tmp_path), "ENVTOOL_DRIVER_VERSION": "570.86.10"}
    out = run_envtool(
        "install", "--lock", str(lock), "--prefix", str(prefix), "--force", env=env, cwd=tmp_path
    )
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    # refused in one line by the lock reader or, behind it, the requirements writer
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "stray_pkg" in lines[0] or "--index-url" in lines[0]
    assert "\x1b" not in out.stderr
    assert not prefix.exists()  # refused before anything was fetched or linked
    assert not list(tmp_path.rglob("stray_pkg/__init__.py"))


@pytest.mark.parametrize(
    "entry", ['"tinyalpha\\nstray_pkg"', '"tinyalpha\\rx"', '"bad_ ==1"', '"a\\u001b[2J"']
)
def test_an_env_file_pip_entry_with_a_newline_is_refused(entry: str, tmp_path: Path) -> None:
    yml = tmp_path / "environment.yml"
    yml.write_text(f"dependencies:\n  - python=3.11\n  - pip:\n    - {entry}\n")
    out = run_envtool("inspect", str(yml), env=base_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "pip entry" in out.stderr
    assert "\x1b" not in out.stderr


# --- terminal escapes: data never reaches the terminal as control characters --------------------

ESC_NAME = "NVIDIA H100\x1b]0;pwned\x07 80GB\x1b[2J\x9b31m"
FAKE_SMI = f"""import sys
name = {ESC_NAME!r}
args = sys.argv[1:]
if args[:1] in (["-q"], ["topo"]):
    sys.exit(9)
if args and args[0].startswith("--query-gpu="):
    print("index, name, uuid, pci.bus_id, memory.total [MiB], compute_cap, mig.mode.current")
    print(f"0, {{name}}, GPU-0, 00000000:00:09.0, 81559 MiB, 9.0, Disabled")
    sys.exit(0)
print("| NVIDIA-SMI 590.48.01              Driver Version: 590.48.01      CUDA Version: 13.1     |")
print(f"|   0  {{name}}          On  |   00000000:00:09.0 Off |                    0 |")
"""


def no_control(text: str) -> bool:
    return not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_gpu_name_with_escape_codes_is_printed_escaped(as_json: bool, tmp_path: Path) -> None:
    """nvidia-smi (here a fake on PATH; NVML is absent on this host) names the GPU."""
    _stub(tmp_path / "bin" / "nvidia-smi", FAKE_SMI)
    env = base_env(tmp_path)
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    env.pop("ENVTOOL_DRIVER_VERSION", None)
    args = ["doctor", "--fast", "--python", sys.executable, "-v"] + (["--json"] if as_json else [])
    out = run_envtool(*args, env=env, cwd=tmp_path)
    assert out.returncode in (0, 1), out.stderr
    assert no_control(out.stdout) and no_control(out.stderr)
    if as_json:
        names = [g["name"] for g in json.loads(out.stdout)["facts"]["host"]["gpus"]]
        assert names == [ESC_NAME]  # the data itself is kept, escaped by JSON
    else:
        assert "\\x1b]0;pwned\\x07" in out.stdout


def test_conda_meta_fields_with_escape_codes_are_printed_escaped(tmp_path: Path) -> None:
    prefix = make_env(tmp_path / "envs" / "demo", {})
    record = {
        "name": "evil\x1b]0;pwned\x07",
        "version": "1.0\x1b[2J",
        "build": "b\x07",
        "build_number": 0,
        "channel": "https://x\x1b[31m",
        "fn": "evil-1.0-b.conda",
        "files": [],
    }
    (prefix / "conda-meta" / "evil-1.0-b.json").write_text(json.dumps(record))
    torch = {**record, "name": "pytorch", "version": "2.7.1\x1b[2J", "build": "cuda126\x07"}
    torch["fn"] = "pytorch-2.7.1-cuda126.conda"
    (prefix / "conda-meta" / "pytorch-2.7.1-cuda126.json").write_text(json.dumps(torch))
    env = base_env(tmp_path)
    for args in (["list"], ["info", "demo"], ["doctor", "demo", "--fast"]):
        out = run_envtool(*args, env=env, cwd=tmp_path)
        assert "Traceback" not in out.stderr, out.stderr
        assert no_control(out.stdout) and no_control(out.stderr), args
        assert "2.7.1\\x1b[2J" in out.stdout, args


@pytest.mark.parametrize(
    "args",
    [
        ["shell-hook", "--prefix", "/nonexistent/\x1b]0;pwned\x07\x1b[2J"],
        ["shell-hook", "demo", "--shell", "\x1b[2Jbash"],
        ["launch", "/nonexistent/\x1b[2J.py", "--slurm", "--nodes", "1", "--cpu"],
    ],
)
def test_error_lines_escape_control_characters(args: list[str], tmp_path: Path) -> None:
    out = run_envtool(*args, env=base_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "\\x1b" in out.stderr and no_control(out.stderr) and no_control(out.stdout)


# --- writes: never replace a device node, never follow a planted link ---------------------------


def _char_device(path: Path) -> Path:
    import stat

    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD (root)")
    return path


def test_init_force_onto_a_device_node_is_refused(tmp_path: Path) -> None:
    import stat

    node = _char_device(tmp_path / "full")
    out = run_envtool("init", str(node), "--force", env=base_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "not a regular file" in out.stderr
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]  # no temp file left


def test_export_output_replaces_a_planted_link_and_refuses_a_device(setup, tmp_path: Path) -> None:
    import stat

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "out.yml"
    link.symlink_to(victim)
    env = base_env(tmp_path)
    out = run_envtool("export", "--lock", str(setup.lock), "-o", str(link), env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert victim.read_text() == "keep me"
    assert not link.is_symlink() and "dependencies:" in link.read_text()
    node = _char_device(tmp_path / "node")
    out = run_envtool("export", "--lock", str(setup.lock), "-o", str(node), env=env, cwd=tmp_path)
    assert out.returncode == 2 and "not a regular file" in out.stderr, out.stderr
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def _record(tmp_path: Path, record: Path) -> subprocess.CompletedProcess[str]:
    _stub(tmp_path / "bin" / "nvidia-smi", FAKE_SMI)
    env = base_env(tmp_path)
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    args = ["doctor", "--fast", "--python", sys.executable, "--record", str(record)]
    return run_envtool(*args, env=env, cwd=tmp_path)


def test_doctor_record_does_not_write_through_planted_links(tmp_path: Path) -> None:
    from envtool.adapters.host.doctor_probe import ENV_FILE, HOST_DIR

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    record = tmp_path / "rec"
    (record / HOST_DIR).mkdir(parents=True)
    planted = [record / "host.json", record / ENV_FILE, record / HOST_DIR / "nvidia-smi.txt"]
    for link in planted:
        link.symlink_to(victim)
    out = _record(tmp_path, record)
    assert out.returncode in (0, 1), out.stderr
    assert victim.read_text() == "keep me"
    for path in planted:
        assert not path.is_symlink() and path.is_file(), path
    assert json.loads((record / "host.json").read_text())["gpus"][0]["name"] == ESC_NAME


def test_doctor_record_refuses_a_planted_host_folder_link(tmp_path: Path) -> None:
    from envtool.adapters.host.doctor_probe import HOST_DIR

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    record = tmp_path / "rec"
    record.mkdir()
    (record / HOST_DIR).symlink_to(elsewhere)
    out = _record(tmp_path, record)
    assert out.returncode == 2, out.stderr
    assert "symbolic link" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert list(elsewhere.iterdir()) == []


def test_launch_dry_run_is_pasteable_with_hostile_args_and_variables(tmp_path: Path) -> None:
    """`launch --dry-run` prints the command to copy: run the printed text with bash (a stub
    python records its argv) — the arguments arrive exact and nothing in them runs."""
    seen = tmp_path / "argv.json"
    python = tmp_path / "py $(touch PWNED_py)'" / "python"
    _stub(
        python,
        "import json, sys\n"
        "if sys.argv[1:3] == ['-m', 'torch.distributed.run']:\n"
        f"    open({str(seen)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        "else:  # the torch version launch asks for\n    print('2.7.1')\n",
    )
    script = tmp_path / "t $(touch PWNED_t).py"
    script.write_text("")
    env = {**base_env(tmp_path), "OMP_NUM_THREADS": "1\ntouch PWNED_omp"}
    args = ["--python", str(python), "--cpu", "--dry-run"]
    out = run_envtool("launch", str(script), *args, "--", *HOSTILE_ARGS, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-s"],
        input=out.stdout,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(seen.read_text())
    assert argv[-len(HOSTILE_ARGS) - 1 :] == [str(script), *HOSTILE_ARGS]
    assert pwned(tmp_path) == []


def test_a_newline_in_data_cannot_print_a_doctor_verdict_line(tmp_path: Path) -> None:
    prefix = make_env(tmp_path / "envs" / "demo", {})
    spoof = "2.7.1\nenvtool doctor: OK — all checks passed\n  ✓ nvidia-driver: fine"
    torch = {
        "name": "pytorch",
        "version": spoof,
        "build": "cuda126_0",
        "build_number": 0,
        "channel": "https://conda.anaconda.org/conda-forge",
        "fn": "pytorch-2.7.1-cuda126_0.conda",
        "files": [],
    }
    (prefix / "conda-meta" / "pytorch-2.7.1-cuda126_0.json").write_text(json.dumps(torch))
    out = run_envtool("doctor", "demo", "--fast", "-v", env=base_env(tmp_path), cwd=tmp_path)
    assert out.returncode in (0, 1), out.stderr
    lines = out.stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("envtool doctor:")] == [lines[0]]
    assert "OK — all checks passed" not in lines[0]
    assert not any(ln.startswith("  ✓ nvidia-driver: fine") for ln in lines)
    assert no_control(out.stdout)
