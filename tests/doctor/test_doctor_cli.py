"""`envtool doctor` end to end: the real CLI on this (GPU-less) machine, --json, --fast,
--record/--replay (this host, and a directory built from the real 2×H200 capture), --deep on CPU
through the real torchrun path, and exit codes 0/1/2."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO, FakeHost, run_envtool

from envtool.adapters.host import deep as deep_adapter
from envtool.adapters.proc import ProcResult
from envtool.core.facts import EnvFacts, HostFacts, TorchFacts

CHECK_KEYS = {"id", "status", "summary", "evidence", "fix"}


def envtool(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The installed console script, from the repo root: these tests also prove the entry point."""
    return run_envtool(*args, cwd=REPO, timeout=timeout, script=True)


def write_env(directory: Path, env: EnvFacts) -> None:
    (directory / "env.json").write_text(json.dumps(env.to_dict()))


@pytest.fixture
def h200_record(fake_h200: FakeHost, tmp_path: Path) -> Path:
    """A --record directory rebuilt from fixtures/h200-x2-host (raw nvidia-smi outputs) plus the
    env facts its collect_env.txt shows (torch 2.11.0+cu130, CUDA available)."""
    return fake_h200.record(
        tmp_path / "h200",
        EnvFacts(
            python_exe="/usr/bin/python3",
            prefix="/usr",
            python_version="3.12.3",
            torch=TorchFacts(
                version="2.11.0+cu130",
                cuda="13.0",
                nccl="2.28.9",
                is_available=True,
                device_count=2,
            ),
        ),
    )


# ----------------------------------------------------------------- this machine


@pytest.mark.integration
def test_doctor_on_this_gpu_less_machine_says_no_driver_and_reports_torch():
    proc = envtool("doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("envtool doctor: OK — no NVIDIA driver")
    assert "torch 2.13.0+cpu" in proc.stdout


@pytest.mark.integration
def test_fast_reads_torch_without_running_python():
    proc = envtool("doctor", "--fast", "--json")
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)["facts"]["env"]
    assert env["status"] == "not-probed"
    assert env["torch"]["version"] == "2.13.0+cpu"
    assert env["torch"]["is_available"] is None  # nothing was imported


@pytest.mark.integration
def test_json_record_then_replay_gives_the_same_checks(tmp_path: Path):
    rec = tmp_path / "rec"
    live = envtool("doctor", "--json", "--record", str(rec))
    assert live.returncode == 0, live.stderr
    doc = json.loads(live.stdout)  # exactly one object: json.loads rejects trailing data
    # the envelope every command prints, doctor's schema its payload (README: doctor --json)
    assert set(doc) == {"version", "command", "exit_code", "status", "checks", "facts", "target"}
    assert doc["command"] == "doctor" and doc["exit_code"] == 0
    # which environment was checked, and why: nothing active here, so envtool's own python
    assert doc["target"]["source"] == "own" and doc["target"]["python"] == sys.executable
    assert doc["target"]["line"].startswith(f"checking envtool's own python {sys.executable}")
    assert doc["version"] == 1 and doc["status"] in ("ok", "warn")
    assert all(set(c) == CHECK_KEYS for c in doc["checks"])
    ids = [c["id"] for c in doc["checks"]]
    assert {"nvidia-driver", "driver-vs-torch-cuda", "cpu-torch-on-gpu-host"} <= set(ids)
    assert doc["facts"]["host"]["driver_version"] is None
    torch = doc["facts"]["env"]["torch"]
    assert torch["version"] == "2.13.0+cpu" and torch["cuda"] is None
    assert torch["is_available"] is False

    assert (rec / "env.json").is_file() and (rec / "host" / "probe.json").is_file()
    replay = envtool("doctor", "--json", "--replay", str(rec))
    assert replay.returncode == 0, replay.stderr
    strip = lambda doc: [(c["id"], c["status"], c["summary"]) for c in doc["checks"]]  # noqa: E731
    assert strip(json.loads(replay.stdout)) == strip(json.loads(live.stdout))


# ----------------------------------------------------------------- replay of real captures


@pytest.mark.integration
def test_replay_of_the_h200_capture_is_healthy(h200_record: Path):
    proc = envtool("doctor", "--replay", str(h200_record), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "ok"
    host = doc["facts"]["host"]
    assert host["driver_version"] == "580.159.04" and host["driver_cuda"] == "13.0"
    assert [(g["name"], g["capability"]) for g in host["gpus"]] == [("NVIDIA H200", "9.0")] * 2
    assert host["nvlink"] is True
    status = {c["id"]: c["status"] for c in doc["checks"]}
    assert status["driver-vs-torch-cuda"] == "ok" and status["gpu-arch-covered"] == "ok"
    human = envtool("doctor", "--replay", str(h200_record))
    assert human.stdout.splitlines()[0] == (
        "envtool doctor: OK — no problems found: torch 2.11.0+cu130 on 2× NVIDIA H200 "
        "(driver 580.159.04)"
    )
    assert "2× NVIDIA H200 sm_90, NVLink" in human.stdout


@pytest.mark.integration
def test_replay_with_an_old_driver_fails_with_the_fix(h200_record: Path):
    proc = envtool("doctor", "--replay", str(h200_record), "--driver", "470.182.03")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    # the cause first: no driver of the 470 branch drives a Hopper GPU (then the CUDA mismatch)
    assert lines[0] == (
        "envtool doctor: FAIL — driver 470.182.03 cannot drive NVIDIA H200, sm_90: it needs "
        "≥ 520.61.05"
    )
    assert any("torch 2.11.0+cu130 needs driver ≥ 580.65.06 (CUDA 13.0)" in x for x in lines)
    # no driver of the 470 branch drives a Hopper GPU: no CUDA build is suggested (issue 12)
    assert not any("--cuda" in x for x in lines), proc.stdout
    assert any(
        "fix: upgrade the NVIDIA driver to ≥ 520.61.05 for this GPU (NVIDIA H200, sm_90)" in x
        for x in lines
    )


@pytest.mark.integration
def test_replay_of_a_host_whose_driver_hung_fails_with_the_fix(tmp_path: Path):
    # Record a live probe whose NVML never answers (a wedged driver), then replay it through the CLI.
    from envtool.adapters.host.host_probe import probe_host

    release = threading.Event()

    class Wedged:
        def nvmlInit(self) -> None:
            release.wait()
            raise RuntimeError("released after the probe gave up")

    proc_root = tmp_path / "proc"
    (proc_root / "driver" / "nvidia").mkdir(parents=True)
    (proc_root / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Release Build\n"
    )
    record: dict[str, str] = {}
    try:
        probe_host(
            {},
            runner=lambda argv, **_: ProcResult(tuple(argv), None, missing=True),
            nvml=Wedged(),
            record=record,
            proc_root=proc_root,
            nvml_timeout=0.2,
        )
    finally:
        release.set()
    rec = tmp_path / "rec"
    (rec / "host").mkdir(parents=True)
    for name, text in record.items():
        (rec / "host" / name).write_text(text)
    torch = TorchFacts(version="2.11.0+cu130", cuda="13.0")  # as --fast reads it
    write_env(rec, EnvFacts(python_exe="/usr/bin/python3", prefix="/usr", torch=torch))
    proc = envtool("doctor", "--replay", str(rec))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("envtool doctor: FAIL — the NVIDIA driver is not answering")
    assert any("fix:" in x and "dmesg | grep -i xid" in x and "nvidia-smi -r" in x for x in lines)


def test_the_facts_line_of_an_unfinished_env_probe_does_not_say_torch_is_missing():
    # On a hung driver doctor stops the env probe and torch-present is a (hidden) skip: the facts
    # line is then all the user reads about torch, and the torch may well be installed.
    from envtool.commands.doctor import render_facts

    host = HostFacts(driver_version="580.159.04", source="proc", driver_hung=True)
    env = EnvFacts(
        python_exe="/envs/x/bin/python",
        status="timeout",
        error="/envs/x/bin/python: stopped waiting for the probe (the NVIDIA driver ...)",
    )
    assert render_facts(host, env)[1] == (
        "env:  /envs/x/bin/python: torch not read (the probe did not finish)"
    )


@pytest.mark.integration
def test_replay_of_a_failing_host_json_recording_exits_1(tmp_path: Path):
    # fixtures/collect_env/08: a CUDA 11.0 wheel on a host without a driver, recorded as host.json
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "host.json").write_text(
        json.dumps(HostFacts(no_driver_reason="nvidia-smi not found").to_dict())
    )
    write_env(
        rec, EnvFacts(torch=TorchFacts(version="1.7.0+cu110", cuda="11.0", is_available=False))
    )
    proc = envtool("doctor", "--replay", str(rec), "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["status"] == "fail"
    drv = next(c for c in doc["checks"] if c["id"] == "nvidia-driver")
    assert drv["status"] == "fail" and "450.36.06" in drv["fix"]


# ----------------------------------------------------------------- bad usage: exit 2


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--replay", "/nonexistent/doctor-rec"], "no such directory"),
        (["--replay", "{tmp}"], "not a doctor recording"),
        (["--replay", "{tmp}", "--record", "{tmp}/x"], "exclude each other"),
        (["--driver", "banana", "--fast"], "not a driver version"),
        (["--prefix", "/nonexistent/env"], "no such directory"),
        (["--record", "{tmp}/a-file", "--fast"], "cannot write the recording (Not a directory)"),
    ],
)
def test_bad_usage_is_one_line_exit_2(args, needle, tmp_path: Path):
    (tmp_path / "a-file").touch()
    proc = envtool("doctor", *[a.format(tmp=tmp_path) for a in args])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Traceback" not in proc.stderr


@pytest.mark.integration
def test_bad_replay_env_json_is_a_usage_error(tmp_path: Path):
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "env.json").write_text("{}")
    (tmp_path / "env.json").write_text("{not json")
    proc = envtool("doctor", "--replay", str(tmp_path))
    assert proc.returncode == 2 and "env.json" in proc.stderr


# ----------------------------------------------------------------- probing and --deep


def test_host_and_env_probes_overlap(monkeypatch: pytest.MonkeyPatch):
    """The host probe must run while the env probe (importing torch) runs, not after it."""
    from envtool.adapters.host import doctor_probe, env_probe, host_probe
    from envtool.adapters.locate import resolve_target

    env_started = threading.Event()
    seen_overlap: list[bool] = []

    def fake_env(target, timeout=120.0, cancel=None):
        env_started.set()
        return EnvFacts(python_exe=str(target.python))

    def fake_host(record=None, **kw):
        seen_overlap.append(env_started.wait(timeout=10))
        return HostFacts()

    monkeypatch.setattr(env_probe, "probe_env", fake_env)
    monkeypatch.setattr(host_probe, "probe_host", fake_host)
    host, env = doctor_probe.probe_facts(resolve_target(), fast=False, driver=None, record=None)
    assert seen_overlap == [True]
    assert isinstance(host, HostFacts) and env.python_exe


def test_deep_child_env_and_argv():
    env = deep_adapter.child_environ({"PATH": "/bin", "NCCL_NVLS_ENABLE": "1"}, cpu=False)
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert "ENVTOOL_DEEP_CPU" not in env
    argv = deep_adapter.plan_allreduce("/env/bin/python", "/tmp/o.json", 8)
    assert argv[:6] == [
        "/env/bin/python",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "8",
    ]
    assert argv[6].endswith("deep_script.py")


def test_deep_reports_a_crashed_worker_as_a_failure():
    calls = []

    def runner(argv, timeout=30.0, env=None, **kw):
        calls.append((argv, env))
        return ProcResult(
            tuple(argv), 1, "", "RuntimeError: CUDA error: no kernel image is available"
        )

    out = deep_adapter.probe_deep("/env/bin/python", 2, runner=runner)
    assert "no kernel image" in out["matmul"]["error"]
    assert "no kernel image" in out["allreduce"]["error"]
    assert all(env["NCCL_NVLS_ENABLE"] == "0" for _, env in calls)
    assert deep_adapter.probe_deep("/env/bin/python", 0)["skipped"] == "no GPU visible to torch"


@pytest.mark.slow
@pytest.mark.integration
def test_deep_cpu_runs_real_torchrun_and_checks_the_sum(tmp_path: Path):
    """The real path: torch.distributed.run, 2 processes (gloo), exact-sum check, busbw."""
    rec = tmp_path / "rec"
    proc = envtool("doctor", "--deep-cpu", "--json", "--record", str(rec), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    mm, ar = checks["deep-matmul"], checks["deep-allreduce"]
    assert mm["status"] == "ok", mm
    assert ar["status"] == "ok", ar
    assert ar["evidence"]["world_size"] == 2 and ar["evidence"]["backend"] == "gloo"
    assert set(ar["evidence"]["busbw_gbps"]) == {"1 MiB", "4 MiB"}
    # busbw = algbw * 2(n-1)/n, which is algbw itself for n = 2
    assert ar["evidence"]["busbw_gbps"] == ar["evidence"]["algbw_gbps"]
    assert all(v > 0 for v in ar["evidence"]["busbw_gbps"].values())
    # the recording carries the --deep results, so a replay shows the same numbers
    replay = envtool("doctor", "--replay", str(rec), "--json")
    again = {c["id"]: c for c in json.loads(replay.stdout)["checks"]}
    assert again["deep-allreduce"] == ar and again["deep-matmul"] == mm


@pytest.mark.integration
def test_deep_without_gpu_skips_with_the_reason():
    proc = envtool("doctor", "--deep", "--fast")
    assert proc.returncode == 0, proc.stderr
    assert "deep-allreduce: no GPU visible to torch" in proc.stdout


@pytest.mark.integration
def test_interrupted_install_is_a_failure(tmp_path: Path):
    """An install killed half-way leaves envtool's marker; doctor must not call it healthy."""
    from envtool.adapters.install.install_state import write_incomplete_marker

    prefix = tmp_path / "envs" / "train"
    (prefix / "conda-meta").mkdir(parents=True)
    write_incomplete_marker(prefix, "0" * 64, tmp_path / "conda-lock.yml")
    proc = envtool("doctor", "--prefix", str(prefix), "--fast", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["install-state"]["status"] == "fail"
    # the install again, from the lock the marker recorded (`envtool install NAME` had no lock)
    lock = tmp_path / "conda-lock.yml"
    assert checks["install-state"]["fix"] == f"envtool install --lock {lock} --prefix {prefix}"
    assert checks["torch-present"]["summary"] == "torch is not installed in this environment"
    assert json.loads(proc.stdout)["checks"][0]["id"] == "install-state"  # the headline cause


@pytest.mark.integration
def test_hung_torchrun_is_killed_with_workers_in_their_own_sessions(tmp_path: Path):
    """torchrun starts each worker with start_new_session=True: out of reach of the group kill,
    and holding the output pipes, so the time-out must find and kill them too (not wait)."""
    import os
    import time

    pidfile = tmp_path / "worker.pid"
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen(['sleep', '30'], start_new_session=True)\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(120)\n"
    )
    started = time.monotonic()
    res = deep_adapter.run_group([sys.executable, "-c", code], timeout=3)
    elapsed = time.monotonic() - started
    worker = int(pidfile.read_text())
    try:
        assert res.timed_out and res.returncode is None
        assert elapsed < 20, f"run_group waited {elapsed:.0f}s for the orphaned worker"
        # SIGKILL is delivered asynchronously: give the kernel a moment to reap it under load
        state = "?"
        for _ in range(50):
            try:
                with open(f"/proc/{worker}/stat") as f:
                    state = f.read().split()[2]
            except FileNotFoundError:
                state = "gone"
            if state in ("Z", "gone"):
                break
            time.sleep(0.1)
        assert state in ("Z", "gone"), "the worker outlived the timed-out launcher"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, 9)


@pytest.mark.integration
def test_hung_torchrun_is_killed_with_its_workers(tmp_path: Path):
    """A hang (e.g. NCCL init) must not leave worker processes holding the GPUs."""
    import os
    import time

    pidfile = tmp_path / "worker.pid"
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen(['sleep', '120'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(120)\n"
    )
    res = deep_adapter.run_group([sys.executable, "-c", code], timeout=3)
    assert res.timed_out and res.returncode is None
    worker = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        try:
            with open(f"/proc/{worker}/stat") as f:  # a zombie waiting to be reaped is dead
                if f.read().split()[2] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        os.kill(worker, 9)
        pytest.fail("the worker outlived the timed-out launcher")


@pytest.mark.integration
def test_doctor_of_a_named_env_names_it_in_the_fix(tmp_path: Path) -> None:
    """`envtool doctor demo` on an env without torch: the fix is a command to paste."""
    demo = tmp_path / "envs" / "demo"
    (demo / "bin").mkdir(parents=True)
    (demo / "conda-meta").mkdir()
    (demo / "conda-meta" / "history").write_text("")
    python = demo / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S -I "$@"\n')  # no site: no torch
    python.chmod(0o755)
    proc = run_envtool(
        "doctor", "demo", "--json", env={**os.environ, "ENVTOOL_ENVS_DIR": str(tmp_path / "envs")}
    )
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["torch-present"]["status"] == "fail"
    assert "envtool create demo --cuda auto" in checks["torch-present"]["fix"]
    assert "NAME" not in checks["torch-present"]["fix"]
