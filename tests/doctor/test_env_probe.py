"""In-environment probe: the target's own python reports its torch; conda-meta and dist-info are
read without python; hangs, crashes and missing interpreters come back as facts."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO

from envtool.adapters.host import env_probe
from envtool.adapters.host.env_probe import probe_env, read_installed, read_torch_static
from envtool.adapters.host.host_probe import probe_host
from envtool.adapters.locate import Target

VENV_PY = REPO / ".venv" / "bin" / "python"


def wrapper(tmp_path: Path, name: str, body: str) -> Target:
    """An env whose 'python' is a #! script around the real interpreter, for the probe to run."""
    exe = tmp_path / name / "bin" / "python"
    exe.parent.mkdir(parents=True)
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return Target(exe, exe.parent.parent)


# ---------------------------------------------------------------- real interpreters


@pytest.mark.integration
def test_probe_of_the_project_venv_sees_its_cpu_torch() -> None:
    if not VENV_PY.exists():
        pytest.skip("no .venv with torch")
    facts = probe_env(Target(VENV_PY, REPO / ".venv"))
    assert facts.status == "ok", facts.error
    assert re.fullmatch(r"3\.\d+\.\d+", facts.python_version or "")
    assert facts.torch is not None and facts.torch_import_error is None
    assert facts.torch.version.startswith("2.13.0")
    static = read_torch_static(REPO / ".venv")  # what --fast reports without running python
    assert static is not None and (static.version, static.cuda) == (facts.torch.version, None)
    assert facts.torch.cuda is None
    assert facts.torch.is_available is False and facts.torch.device_count == 0
    assert facts.torch.path == str(
        REPO / ".venv" / "lib" / "python3.11" / "site-packages" / "torch" / "__init__.py"
    )
    # the dist-info pip left behind is found statically and through the interpreter's site dirs, once
    assert [(p["version"], p["installer"]) for p in facts.pip_torch] == [
        (facts.torch.version, "pip")
    ]


def _mixed_cuda_records(fixtures: Path) -> list[tuple[dict, str]]:
    """Real repodata records of the mixed-CUDA legacy solve (fixtures/README.md): pytorch 2.3.1
    cuda12.1 + pytorch-cuda 12.1 from the pytorch channel and cuda-version 12.6 from nvidia."""
    base = fixtures / "repodata" / "harvested-from-pixi-locks"
    wanted = {
        ("pytorch", "linux-64", "pytorch-2.3.1-py3.11_cuda12.1_cudnn8.9.2_0.tar.bz2"),
        ("pytorch", "linux-64", "pytorch-cuda-12.1-ha16c6d3_5.tar.bz2"),
        ("pytorch", "noarch", "pytorch-mutex-1.0-cuda.tar.bz2"),
        ("nvidia", "noarch", "cuda-version-12.6-3.conda"),
    }
    out = []
    for channel, subdir, fn in sorted(wanted):
        repodata = json.loads((base / channel / subdir / "repodata.json").read_text())
        rec = repodata.get("packages", {}).get(fn) or repodata["packages.conda"][fn]
        out.append((rec, f"https://conda.anaconda.org/{channel}/{subdir}"))
    return out


def write_conda_meta(prefix: Path, records: list[tuple[dict, str]]) -> None:
    meta = prefix / "conda-meta"
    meta.mkdir(parents=True, exist_ok=True)
    for rec, channel_url in records:
        data = dict(rec, channel=channel_url, files=[])
        (meta / f"{rec['name']}-{rec['version']}-{rec['build']}.json").write_text(json.dumps(data))
    # unrelated packages and a torn record must not disturb the reading
    (meta / "python-3.11.9-h1_0.json").write_text(
        json.dumps({"name": "python", "version": "3.11.9"})
    )
    (meta / "nccl-2.21.5.1-h3a97aeb_0.json").write_text("{ torn")
    (meta / "history").write_text("")


@pytest.mark.integration
def test_venv_without_torch_reports_the_import_error_and_conda_records(
    fixtures: Path, tmp_path: Path
) -> None:
    prefix = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    write_conda_meta(prefix, _mixed_cuda_records(fixtures))
    facts = probe_env(Target(prefix / "bin" / "python", prefix))
    assert facts.status == "ok", facts.error
    assert facts.torch is None
    assert facts.torch_import_error and "No module named 'torch'" in facts.torch_import_error
    assert facts.conda_packages == {
        "pytorch": {
            "version": "2.3.1",
            "build": "py3.11_cuda12.1_cudnn8.9.2_0",
            "channel": "pytorch",
        },
        "pytorch-cuda": {"version": "12.1", "build": "ha16c6d3_5", "channel": "pytorch"},
        "pytorch-mutex": {"version": "1.0", "build": "cuda", "channel": "pytorch"},
        "cuda-version": {"version": "12.6", "build": "3", "channel": "nvidia"},
    }


@pytest.mark.integration
def test_probe_script_drops_its_own_folder_from_sys_path(tmp_path: Path) -> None:
    """A module next to the script must not shadow what torch (or the probe) imports."""
    shadow = tmp_path / "adapters"
    shadow.mkdir()
    shutil.copy(env_probe.SCRIPT, shadow / "env_probe_script.py")
    (shadow / "torch.py").write_text("raise SystemExit('shadowed')\n")
    out = subprocess.run(
        [sys.executable, "-s", str(shadow / "env_probe_script.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},
    )
    line = out.stdout.strip().splitlines()[-1]
    data = json.loads(line.removeprefix(env_probe.MARKER))
    assert "shadowed" not in (data["torch_import_error"] or "")


# ---------------------------------------------------------------- failure modes become facts


@pytest.mark.integration
def test_a_hanging_interpreter_times_out(tmp_path: Path) -> None:
    target = wrapper(tmp_path, "hang", f"exec {sys.executable} -c 'import time; time.sleep(60)'")
    facts = probe_env(target, timeout=1)
    assert facts.status == "timeout"
    assert "1s" in (facts.error or "")
    assert facts.torch is None


@pytest.mark.integration
def test_doctor_stops_waiting_for_the_env_once_the_host_probe_finds_the_driver_hung(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a wedged driver torch's CUDA init blocks like NVML does: once the host probe says so,
    doctor stops waiting for the env's python (it would wait out the 120 s time-out) and the
    verdict stays the driver's."""
    from envtool.adapters.host import host_probe
    from envtool.adapters.host.doctor_probe import probe_facts
    from envtool.core.checks import SKIP, check_torch_present
    from envtool.core.facts import HostFacts

    target = wrapper(tmp_path, "hang", f"exec {sys.executable} -c 'import time; time.sleep(600)'")
    hung = HostFacts(driver_version="580.159.04", driver_hung=True)
    monkeypatch.setattr(host_probe, "probe_host", lambda record=None: hung)
    host, env = probe_facts(target, fast=False, driver=None, record=None)
    assert env.status == "timeout"
    assert "stopped waiting" in (env.error or "") and "not answering" in (env.error or "")
    assert check_torch_present(host, env).status == SKIP


@pytest.mark.integration
def test_a_failing_host_probe_is_reported_without_waiting_for_the_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad ENVTOOL_NVML_TIMEOUT (say) is an exit-2 error at once, not after the env probe's
    120 s time-out. Liveness guard: the call must come back well inside those 120 s."""
    from envtool.adapters.host import host_probe
    from envtool.adapters.host.doctor_probe import probe_facts
    from envtool.errors import UsageError

    target = wrapper(tmp_path, "hang", f"exec {sys.executable} -c 'import time; time.sleep(600)'")

    def bad_host(record=None):
        raise UsageError("ENVTOOL_NVML_TIMEOUT='soon': not a number of seconds", "e.g. 30")

    monkeypatch.setattr(host_probe, "probe_host", bad_host)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            probe_facts(target, fast=False, driver=None, record=None)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            raised.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "doctor waited out the env probe before reporting the error"
    assert len(raised) == 1 and isinstance(raised[0], UsageError)


@pytest.mark.integration
def test_run_capture_stops_a_command_when_cancelled_and_keeps_feeding_stdin() -> None:
    from envtool.adapters.proc import run_capture

    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    res = run_capture([sys.executable, "-c", "import time; time.sleep(600)"], cancel=cancel)
    assert res.timed_out and res.returncode is None
    fed = run_capture([sys.executable, "-c", "print(input()[::-1])"], stdin="abc\n")
    assert (fed.returncode, fed.stdout) == (0, "cba\n")
    late = run_capture([sys.executable, "-c", "import time; time.sleep(600)"], timeout=0.3)
    assert late.timed_out


@pytest.mark.integration
def test_run_capture_with_a_cancel_event_feeds_stdin_to_a_slow_reader() -> None:
    # With `cancel`, the wait is a series of short ones: the input must survive them (a second
    # communicate() given the input again raises ValueError).
    from envtool.adapters.proc import run_capture

    code = "import time; time.sleep(0.5); print(input()[::-1])"
    res = run_capture([sys.executable, "-c", code], stdin="abc\n", cancel=threading.Event())
    assert (res.returncode, res.stdout) == (0, "cba\n")


@pytest.mark.integration
def test_run_capture_keeps_the_output_of_a_stopped_command_whose_pipes_stay_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that started a grandchild (which holds the output pipes) and is then stopped: the
    output read so far comes back, as subprocess.run gave it, not empty."""
    from envtool.adapters import proc

    monkeypatch.setattr(proc, "KILL_WAIT_SECONDS", 0.2)
    printed, release = tmp_path / "printed", tmp_path / "release"
    holder = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.02)"
    code = (
        "import pathlib, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {holder!r}])\n"
        "print('partial out', flush=True)\n"
        "print('partial err', file=sys.stderr, flush=True)\n"
        f"pathlib.Path({str(printed)!r}).touch()\n"
        "time.sleep(600)\n"
    )
    cancel = threading.Event()

    def stop_once_printed() -> None:
        while not printed.exists():
            threading.Event().wait(0.02)
        cancel.set()

    threading.Thread(target=stop_once_printed, daemon=True).start()
    try:
        res = proc.run_capture([sys.executable, "-c", code], cancel=cancel)
    finally:
        release.touch()  # the grandchild exits
    assert res.timed_out
    assert (res.stdout, res.stderr) == ("partial out\n", "partial err\n")


@pytest.mark.integration
def test_run_capture_interrupted_leaves_no_command_running(tmp_path: Path) -> None:
    """A signal that stops envtool while it waits (SIGINT sent to envtool alone, not to its
    terminal's process group) kills the command, as subprocess.run did: an install step must not
    keep changing the environment after envtool has given up."""
    from envtool.adapters.proc import run_capture

    pid_file = tmp_path / "pid"
    code = (
        "import os, pathlib, time\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
        "time.sleep(600)\n"
    )

    class Interrupted(Exception):
        pass

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    def interrupt_once_started() -> None:
        while not (pid_file.exists() and pid_file.read_text()):
            threading.Event().wait(0.02)
        os.kill(os.getpid(), signal.SIGUSR1)

    old = signal.signal(signal.SIGUSR1, interrupt)
    threading.Thread(target=interrupt_once_started, daemon=True).start()
    try:
        with pytest.raises(Interrupted):
            run_capture([sys.executable, "-c", code])
    finally:
        signal.signal(signal.SIGUSR1, old)
    pid = int(pid_file.read_text())

    def running() -> bool:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False  # reaped
        return stat[stat.rfind(")") + 2] not in "ZX"

    for _ in range(500):  # a SIGKILL lands within moments; this only bounds the wait
        if not running():
            break
        threading.Event().wait(0.02)
    still = running()
    if still:
        os.kill(pid, signal.SIGKILL)
    assert not still, "the command kept running after run_capture was interrupted"


@pytest.mark.integration
def test_an_aborting_interpreter_is_reported_as_crashed_with_its_stderr(tmp_path: Path) -> None:
    target = wrapper(
        tmp_path,
        "abort",
        f"exec {sys.executable} -c 'import os, sys; sys.stderr.write(\"Illegal instruction in libtorch_cpu\\n\"); sys.stderr.flush(); os.abort()'",
    )
    facts = probe_env(target)
    assert facts.status == "crashed"
    assert "SIGABRT" in (facts.error or "") and "Illegal instruction in libtorch_cpu" in (
        facts.error or ""
    )


@pytest.mark.integration
def test_json_then_a_crash_at_exit_keeps_the_facts_and_notes_the_exit(tmp_path: Path) -> None:
    target = wrapper(
        tmp_path,
        "exitcrash",
        f'{sys.executable} -s "$@"\necho "free(): invalid pointer" >&2\nexit 134',
    )
    facts = probe_env(target)
    assert facts.status == "ok"
    assert facts.python_version is not None
    assert "code 134" in (facts.error or "") and "invalid pointer" in (facts.error or "")


def test_missing_python_is_no_python(tmp_path: Path) -> None:
    facts = probe_env(Target(tmp_path / "gone" / "bin" / "python", tmp_path / "gone"))
    assert facts.status == "no-python" and "no such file" in (facts.error or "")


@pytest.mark.integration
def test_host_and_env_probes_can_run_concurrently(tmp_path: Path) -> None:
    """doctor runs both at once; neither keeps global state."""
    target = wrapper(tmp_path, "plain", f'exec {sys.executable} -s "$@"')
    barrier = threading.Barrier(2)

    def env_job():
        barrier.wait()
        return probe_env(target)

    def host_job():
        barrier.wait()
        return probe_host({}, nvml=None, proc_root=tmp_path)

    with ThreadPoolExecutor(2) as pool:
        env_f, host_f = pool.submit(env_job), pool.submit(host_job)
        env_facts, host_facts = env_f.result(timeout=120), host_f.result(timeout=120)
    assert env_facts.status == "ok" and env_facts.python_version
    assert host_facts.driver_version is None and host_facts.no_driver_reason


# ---------------------------------------------------------------- static reads


def make_dist(site: Path, version: str, installer: str | None) -> Path:
    d = site / f"torch-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n\nbody\n")
    if installer is not None:
        (d / "INSTALLER").write_text(installer + "\n")
    return d


def test_two_torches_in_one_env_are_both_reported(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    conda_dist = make_dist(site, "2.3.1", "conda")
    pip_dist = make_dist(site, "2.4.0", "pip")
    (site / "torchvision-0.19.0.dist-info").mkdir()  # not torch
    (site / "torch-2.4.0.dist-info.bak").mkdir()  # not a distribution
    conda, pip_torch = read_installed(tmp_path)
    assert conda == {}
    assert pip_torch == [
        {"name": "torch", "version": "2.3.1", "installer": "conda", "location": str(conda_dist)},
        {"name": "torch", "version": "2.4.0", "installer": "pip", "location": str(pip_dist)},
    ]


def test_read_torch_static_reads_version_py_without_importing(tmp_path: Path) -> None:
    torch_dir = tmp_path / "lib" / "python3.11" / "site-packages" / "torch"
    torch_dir.mkdir(parents=True)
    # the layout torch 2.x writes (compare .venv/.../torch/version.py)
    (torch_dir / "version.py").write_text(
        "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n"
        "__version__ = '2.3.1+cu121'\ndebug = False\ncuda: Optional[str] = '12.1'\n"
        "git_version = '63d5e9221bedd1546b7d364b5ce4171547db12a9'\nhip: Optional[str] = None\n"
    )
    (torch_dir / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    facts = read_torch_static(tmp_path)
    assert facts is not None and (facts.version, facts.cuda) == ("2.3.1+cu121", "12.1")
    assert read_torch_static(tmp_path / "nothing") is None


def test_read_torch_static_on_the_real_venv_sees_its_cpu_torch() -> None:
    if not VENV_PY.exists():
        pytest.skip("no .venv with torch")
    facts = read_torch_static(REPO / ".venv")
    assert facts is not None and facts.version.startswith("2.13.0") and facts.cuda is None


def test_probe_script_is_stdlib_only_and_python38_syntax() -> None:
    source = env_probe.SCRIPT.read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported - {"torch"} <= set(sys.stdlib_module_names)
    assert f'MARKER = "{env_probe.MARKER}"' in source
