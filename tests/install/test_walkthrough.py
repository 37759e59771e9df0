"""README's ten-minute walkthrough, run as a newcomer runs it, on every commit, with no internet.

The commands are README's own: the `$ ` lines of the console block in its walkthrough section
(between the `[start:walkthrough]` and `[end:walkthrough]` markers), run in order in one bash
shell (so `cd` carries over), with `envtool` on PATH and nothing else of the test's set up: a
fresh HOME, no conda, no ENVTOOL_* variables, so envs and caches go where a newcomer's go.

The one substitution is the one README documents for machines without internet: rattler's
`~/.config/rattler/config.toml` mirrors conda-forge to a local HTTP server (tests/mirror_server.py)
serving a channel the test builds (channel_builder.walkthrough_graph: a python stub linking the
test interpreter, and a CPU pytorch 2.13.0 whose .pth reaches the test interpreter's real torch).
`CONDA_OVERRIDE_CUDA=` (no driver) makes a GPU test machine look like the laptop README speaks to.

Each output line README shows under a command must be printed by it (`…` stands for any text; a
line that is only `…` stands for lines not shown). Then what the walkthrough promises is checked
on disk: the lock, the installed env, the run's manifest, the checkpoint, the sample, the verdict.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import envtool_argv
from mirror_server import MirrorServer
from readme_commands import README_TEXT, blocks

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONDA_FORGE = "https://conda.anaconda.org/conda-forge"
# variables that would point envtool away from a newcomer's defaults, or at the test's own env
NOT_A_NEWCOMERS = (
    "ENVTOOL_ENVS_DIR",
    "ENVTOOL_CACHE_DIR",
    "ENVTOOL_CONDA_ROOT",
    "ENVTOOL_DRIVER_VERSION",
    "CONDA_EXE",
    "CONDA_ROOT",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "CONDA_SHLVL",
    "MAMBA_ROOT_PREFIX",
    "VIRTUAL_ENV",
    "RATTLER_CACHE_DIR",
    "RATTLER_AUTH_FILE",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
)


def walkthrough_steps(text: str) -> list[tuple[str, list[str]]]:
    """(command, the output lines README shows under it) for each `$ ` line of the walkthrough's
    console block, in order."""
    section = text.split("[start:walkthrough]", 1)[1].split("[end:walkthrough]", 1)[0]
    block = next(
        [line for _, line in b] for b in blocks(section) if any(x.startswith("$ ") for _, x in b)
    )
    steps: list[tuple[str, list[str]]] = []
    for line in block:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip() != "…":
            steps[-1][1].append(line)
    return steps


def shown_line_printed(shown: str, printed: list[str]) -> bool:
    """A line README shows is one the command printed (`…` in it: any text there)."""
    pattern = re.compile(".*".join(re.escape(part) for part in shown.split("…")))
    return any(pattern.fullmatch(line.rstrip()) for line in printed)


def run_in_one_shell(steps: list[str], cwd: Path, env: dict[str, str]) -> list[tuple[int, str]]:
    """Run each command in one bash, in order, stopping at the first that fails: (exit code,
    everything it printed, stdout and stderr together) per command run."""
    script = ["exec 2>&1"]
    for i, command in enumerate(steps):
        script += [
            f"echo '@@step {i}'",
            command,
            f'rc=$?; echo "@@rc {i} $rc"; [ $rc = 0 ] || exit',
        ]
    proc = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        timeout=1800,
    )
    results = []
    for i, chunk in enumerate(proc.stdout.split("@@step ")[1:]):
        body, _, tail = chunk.partition(f"@@rc {i} ")
        results.append((int(tail.split()[0]) if tail else -1, body.split("\n", 1)[1]))
    return results


@pytest.fixture
def newcomer(tmp_path: Path) -> dict[str, str]:
    """A newcomer's environment: a fresh HOME, envtool on PATH (the installed console script, as
    pipx puts it there), no GPU, and the rattler config.toml README shows, mirroring conda-forge
    to the local channel (the server's URL is filled in by the test)."""
    home = tmp_path / "home"
    (home / ".config" / "rattler").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv = envtool_argv(script=True)
    shim = bin_dir / "envtool"
    shim.write_text("#!/bin/sh\nexec " + " ".join(f"'{a}'" for a in argv) + ' "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in NOT_A_NEWCOMERS}
    env.update(HOME=str(home), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    env["CONDA_OVERRIDE_CUDA"] = ""  # a laptop: no NVIDIA driver, whatever the test machine has
    return env


def test_the_readme_walkthrough_runs_offline(newcomer: dict[str, str], tmp_path: Path) -> None:
    steps = walkthrough_steps(README_TEXT)
    commands = [command for command, _ in steps]
    # the walkthrough README promises: make a project, lock + install, train, sample, a verdict
    assert commands[0].startswith("mkdir ") and commands[-1].startswith("envtool doctor")
    assert [c.split()[1] for c in commands if c.startswith("envtool ")] == [
        "create",
        "init",
        "launch",
        "init",
        "run",
        "doctor",
    ]
    channel = cb.build_channel(tmp_path / "conda-forge", cb.walkthrough_graph())
    work = tmp_path / "work"
    work.mkdir()
    config = Path(newcomer["HOME"]) / ".config" / "rattler" / "config.toml"
    with MirrorServer(channel) as server:
        config.write_text(f'[mirrors]\n"{CONDA_FORGE}" = ["{server.url}"]\n')
        results = run_in_one_shell(commands, work, newcomer)
        served = dict(server.served)

    assert len(results) == len(steps), f"stopped at `{commands[len(results) - 1]}`: {results[-1]}"
    for (command, shown), (rc, printed) in zip(steps, results, strict=True):
        assert rc == 0, f"README walkthrough: `{command}` exited {rc}:\n{printed[-4000:]}"
        lines = printed.splitlines()
        for line in shown:
            assert shown_line_printed(line, lines), (command, line, printed[-4000:])

    # every package came through the mirror of conda-forge (no other network was used)
    assert any(path.endswith("repodata.json") for path in served), served
    assert sum(path.endswith(".conda") for path in served) == len(cb.walkthrough_graph())

    project = work / "hello"
    lock = project / "environments" / "hello" / "conda-lock.yml"
    assert f"{CONDA_FORGE}/linux-64/pytorch-2.13.0-cpu_generic" in lock.read_text()
    prefix = Path(newcomer["HOME"]) / ".local" / "share" / "envtool" / "envs" / "hello"
    assert list((prefix / "conda-meta").glob("pytorch-2.13.0-cpu_*.json"))
    (manifest,) = project.glob("runs/*/manifest.json")
    record = json.loads(manifest.read_text())
    assert record["exit_code"] == 0 and record["env_prefix"] == str(prefix)
    assert (project / "out" / "ckpt.pt").is_file()

    sample = results[next(i for i, c in enumerate(commands) if c.startswith("envtool run "))][1]
    text = sample.split("---\n", 1)[1].split("\n---", 1)[0]
    assert text.strip(), sample  # the sample from the trained checkpoint is text
    assert "envtool doctor: OK" in results[-1][1]
