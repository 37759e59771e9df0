"""`envtool launch` with real torchrun (torch 2.13 CPU from .venv), gloo, tiny scripts.

The torchrun test pattern: every rank writes a file named after its RANK; assert the set.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, run_envtool, start_envtool

from envtool.adapters.host.host_probe import probe_host
from envtool.adapters.launch import launcher
from envtool.adapters.launch.launcher import kill_marked, pids_with_environ

SCRIPTS = REPO / "tests" / "scripts"
RANK_FILE = SCRIPTS / "rank_file.py"

pytestmark = pytest.mark.integration


def launch_env(marker: str) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["ENVTOOL_TEST_MARKER"] = marker  # inherited by torchrun and every rank: find leftovers
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def envtool(
    args: list[str],
    cwd: Path,
    marker: str = "",
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`envtool ARGS` in cwd, its processes marked (a fresh marker unless given)."""
    return run_envtool(
        *args, cwd=cwd, env=env or launch_env(marker or uuid.uuid4().hex), timeout=timeout
    )


def only_run_dir(cwd: Path) -> Path:
    runs = list((cwd / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def leftovers(marker: str) -> list[int]:
    return pids_with_environ(f"ENVTOOL_TEST_MARKER={marker}".encode())


def test_every_rank_runs_and_only_rank_zero_reaches_the_console(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = envtool(["launch", str(RANK_FILE), "--cpu", "--", str(out), "--steps", "2"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} == {"rank-0", "rank-1"}
    assert (out / "rank-1").read_text() == "2"  # WORLD_SIZE
    assert "rank 0 step 2" in proc.stdout
    assert "rank 1 step" not in proc.stdout + proc.stderr

    run = only_run_dir(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    for key in (
        "command", "env_prefix", "python", "torch_version", "lock_hash", "git_commit",
        "driver", "gpus", "nnodes", "nproc_per_node", "start_time", "end_time",
        "exit_code", "failed_rank",
    ):  # fmt: skip
        assert key in manifest, key
    assert manifest["exit_code"] == 0 and manifest["failed_rank"] is None
    assert manifest["torch_version"].startswith("2.13")
    assert manifest["nproc_per_node"] == 2 and manifest["nnodes"] == 1
    assert manifest["command"][1:3] == ["-m", "torch.distributed.run"]
    assert manifest["git_commit"] and len(manifest["git_commit"]) == 40  # script is in this repo
    # every rank's output is kept, rank 1 included
    logs = manifest["rank_logs"]
    assert set(logs) == {"0", "1"}
    rank1_stdout = Path(tmp_path, logs["1"]).with_name("stdout.log").read_text()
    assert "rank 1 step 2" in rank1_stdout
    assert Path(tmp_path, logs["1"]).resolve().is_relative_to(run.resolve())


def test_all_ranks_shows_every_rank(tmp_path: Path) -> None:
    proc = envtool(
        ["launch", str(RANK_FILE), "--cpu", "--all-ranks", "--", str(tmp_path / "o")], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "rank 0 step 1" in proc.stdout and "rank 1 step 1" in proc.stdout


def test_a_failing_rank_is_named_with_its_exception(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [str(out), "--fail-rank", "1", "--at-step", "2", "--steps", "600", "--sleep", "0.05"]
    proc = envtool(["launch", str(RANK_FILE), "--cpu", "--", *args], tmp_path)
    assert proc.returncode == 1
    assert "rank 1 failed first (exit 1 at " in proc.stderr
    assert "[rank1]: ValueError: planted failure on rank 1 at step 2" in proc.stderr
    assert "ChildFailedError" not in proc.stderr  # torchrun's wrapper: launcher.log only
    assert not (out / "rank-0").exists()  # rank 0 (30 s of steps) was stopped, not awaited
    manifest = json.loads((only_run_dir(tmp_path) / "manifest.json").read_text())
    assert manifest["failed_rank"] == 1 and manifest["exit_code"] == 1


def test_a_rank_that_exits_with_a_message_and_no_traceback_is_named_with_it(
    tmp_path: Path,
) -> None:
    """`sys.exit` after a message (argparse, a template's own check): the verdict said only
    "rank 1 failed first (exit 3 …)" and the console never showed the message torchrun shows."""
    out = tmp_path / "out"
    args = [str(out), "--exit-rank", "1", "--at-step", "2", "--steps", "600", "--sleep", "0.05"]
    proc = envtool(["launch", str(RANK_FILE), "--cpu", "--", *args], tmp_path)
    assert proc.returncode == 1
    verdict = next(x for x in proc.stderr.splitlines() if "failed first" in x)
    assert "rank 1 failed first (exit 3 at " in verdict
    assert "): fatal: bad config on rank 1 — logs: " in verdict, verdict
    assert "[rank1]: fatal: bad config on rank 1" in proc.stderr  # its last lines, shown
    manifest = json.loads((only_run_dir(tmp_path) / "manifest.json").read_text())
    assert manifest["failed_rank"] == 1
    # --json: the same verdict as the error object every failed command's envelope has
    (tmp_path / "j").mkdir()
    again = envtool(["launch", str(RANK_FILE), "--cpu", "--json", "--", *args], tmp_path / "j")
    envelope = json.loads(again.stdout)
    message = envelope["error"]["message"]
    assert envelope["exit_code"] == 1 and message.startswith("rank 1 failed first (exit 3 at ")
    assert "): fatal: bad config on rank 1 — logs: " in message, message


def test_a_rank_killed_mid_run_ends_the_job_and_is_named(tmp_path: Path) -> None:
    out = tmp_path / "out"
    marker = uuid.uuid4().hex
    args = [str(out), "--kill-rank", "1", "--at-step", "3", "--steps", "600", "--sleep", "0.05"]
    proc = envtool(["launch", str(RANK_FILE), "--cpu", "--", *args], tmp_path, marker)
    assert proc.returncode != 0
    assert "rank 1 failed first (killed by SIGKILL" in proc.stderr
    assert not (out / "rank-0").exists()
    assert leftovers(marker) == []


@pytest.mark.parametrize("deaf", [False, True], ids=["ranks-obey", "ranks-ignore-signals"])
def test_ctrl_c_stops_every_rank_and_leaves_no_process(tmp_path: Path, deaf: bool) -> None:
    """Ctrl-C is forwarded; ranks that ignore it are killed after a second Ctrl-C (or the
    grace period) — found by the run marker even though torchrun put them in other sessions."""
    marker = uuid.uuid4().hex
    ready = tmp_path / "ready"
    args = [str(tmp_path / "out"), "--steps", "2000", "--sleep", "0.05", "--ready-dir", str(ready)]
    args += ["--ignore-signals"] if deaf else []
    proc = start_envtool(
        "launch", str(RANK_FILE), "--cpu", "--", *args, cwd=tmp_path, env=launch_env(marker)
    )
    try:
        wait_for_ranks(ready, proc)
        assert len(leftovers(marker)) >= 4  # envtool, torchrun, two ranks
        proc.send_signal(signal.SIGINT)  # what the terminal sends on Ctrl-C
        if deaf:
            time.sleep(1.0)
            assert proc.poll() is None  # still waiting for the ranks to stop
            proc.send_signal(signal.SIGINT)  # the impatient second Ctrl-C
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert "stopped by SIGINT" in err
        assert leftovers(marker) == []
        assert not (tmp_path / "out" / "rank-0").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in leftovers(marker):
            os.kill(pid, signal.SIGKILL)


def test_port_29500_in_use_does_not_matter(tmp_path: Path) -> None:
    busy = socket.socket()
    try:
        busy.bind(("127.0.0.1", 29500))
        busy.listen()
    except OSError:
        pass  # someone else already holds it: the port is busy either way
    try:
        proc = envtool(["launch", str(RANK_FILE), "--cpu", "--", str(tmp_path / "o")], tmp_path)
    finally:
        busy.close()
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in (tmp_path / "o").iterdir()} == {"rank-0", "rank-1"}


def expected_resume_result(steps: int = 6, world: int = 2) -> str:
    """The RESULT line of an uninterrupted tests/scripts/resume.py run (same float64 ops)."""
    w = 1.0
    for step in range(1, steps + 1):
        grad = sum(w * (rank + 1) for rank in range(world))
        w = w - 0.01 * grad + step * 0.001
    return f"RESULT w={w!r}"


@pytest.mark.slow
def test_kill_and_relaunch_resumes_from_the_checkpoint(tmp_path: Path) -> None:
    script = str(SCRIPTS / "resume.py")
    die = ["--die-rank", "1", "--die-at-step", "4"]
    crashed = envtool(["launch", script, "--cpu", "--", str(tmp_path), *die], tmp_path)
    assert crashed.returncode != 0
    assert "rank 1 failed first (killed by SIGKILL" in crashed.stderr
    assert json.loads((tmp_path / "ckpt.json").read_text())["step"] == 3
    resumed = envtool(["launch", script, "--cpu", "--", str(tmp_path)], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed at step 4" in resumed.stdout
    assert "step 3 w" not in resumed.stdout  # done steps are not redone
    assert resumed.stdout.strip().splitlines()[-1].endswith(expected_resume_result())


def test_dry_run_prints_the_command_and_runs_nothing(tmp_path: Path) -> None:
    proc = envtool(
        ["launch", str(RANK_FILE), "--cpu", "--nproc", "3", "--dry-run", "--", "x"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert "-m torch.distributed.run --nnodes 1 --nproc-per-node 3" in last
    assert last.endswith(f"{RANK_FILE} x")
    assert "export CUDA_VISIBLE_DEVICES=''" in proc.stdout
    assert not (tmp_path / "runs").exists()

    as_json = envtool(["launch", str(RANK_FILE), "--cpu", "--dry-run", "--json"], tmp_path)
    plan = json.loads(as_json.stdout)["plan"]
    assert plan["backend"] == "gloo" and plan["nproc_per_node"] == 2


def test_more_gpus_than_the_host_has_is_exit_2(tmp_path: Path) -> None:
    if probe_host(launch_env("")).gpus:
        pytest.skip("this host has GPUs")
    proc = envtool(["launch", str(RANK_FILE), "--gpus", "4"], tmp_path)
    assert proc.returncode == 2
    assert "asked for 4 GPUs; this host shows none" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_environment_without_torch_is_exit_2(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    proc = envtool(
        ["launch", str(RANK_FILE), "--cpu", "--python", str(bare / "bin" / "python")], tmp_path
    )
    assert proc.returncode == 2
    assert "torch is not installed" in proc.stderr


def test_kill_marked_finds_processes_in_other_sessions(tmp_path: Path) -> None:
    """torchrun puts each worker in its own session; the env marker still finds it."""
    run_id = "test-" + uuid.uuid4().hex
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "ENVTOOL_RUN_ID": run_id},
        start_new_session=True,
    )
    try:
        assert kill_marked(run_id) == 1
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()


def test_a_process_caught_inside_execve_is_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the kernel releasing Popen and writing the new environment, /proc shows an
    empty environ; the scan re-reads such a process instead of missing it (seen once in CI)."""
    monkeypatch.setattr(launcher, "EXEC_SETTLE_SECONDS", 30.0)  # a loaded CI machine: no race
    proc = tmp_path / "proc"
    execing, kthread = proc / "4242", proc / "2"
    for entry, flags in ((execing, 0x400000), (kthread, 0x208040)):
        entry.mkdir(parents=True)
        (entry / "environ").write_bytes(b"")
        (entry / "cmdline").write_bytes(b"")
        (entry / "stat").write_text(f"{entry.name} (py thon)) S 1 1 1 0 -1 {flags} 0 0\n")
    timer = threading.Timer(0.05, (execing / "environ").write_bytes, [b"A=1\0ENVTOOL_RUN_ID=r1\0"])
    timer.start()
    try:
        assert pids_with_environ(b"ENVTOOL_RUN_ID=r1", proc) == [4242]
    finally:
        timer.cancel()
    # a kernel thread and a zombie have an empty environ for good: not waited on, not found
    (execing / "stat").write_text("4242 (python) Z 1 1 1 0 -1 4194304 0 0\n")
    (execing / "environ").write_bytes(b"")
    assert pids_with_environ(b"ENVTOOL_RUN_ID=r1", proc) == []


@pytest.fixture
def h200_host(tmp_path: Path, fixtures: Path) -> dict[str, str]:
    """A fake `nvidia-smi` replaying the real captures of a 2 x H200 host (fixtures/h200-x2-host)."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    capture = fixtures / "h200-x2-host"
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  "-q -x") exec cat "{capture}/nvidia-smi-q.xml" ;;\n'
        f'  --query-gpu*) exec cat "{capture}/query.csv" ;;\n'
        f'  *) exec cat "{capture}/nvidia-smi.txt" ;;\n'
        "esac\n"
    )
    smi.chmod(0o755)
    env = launch_env(uuid.uuid4().hex)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def run_on(env: dict[str, str], args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return envtool(["launch", str(RANK_FILE), *args], cwd, timeout=60, env=env)


def test_gpu_host_plan_uses_nccl_on_every_gpu_with_multicast_off(
    h200_host: dict[str, str], tmp_path: Path
) -> None:
    proc = run_on(h200_host, ["--dry-run", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    assert plan["backend"] == "nccl" and plan["nproc_per_node"] == 2
    assert plan["env_add"]["NCCL_NVLS_ENABLE"] == "0"
    assert plan["env_add"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


def test_asking_for_more_gpus_than_visible_names_cuda_visible_devices(
    h200_host: dict[str, str], tmp_path: Path
) -> None:
    proc = run_on(h200_host, ["--gpus", "4"], tmp_path)
    assert proc.returncode == 2
    assert "asked for 4 GPUs; this host shows 2" in proc.stderr
    proc = run_on({**h200_host, "CUDA_VISIBLE_DEVICES": "1"}, ["--gpus", "2"], tmp_path)
    assert proc.returncode == 2
    assert "asked for 2 GPUs; this host shows 1 (CUDA_VISIBLE_DEVICES=1)" in proc.stderr


def test_doctor_preflight_refuses_a_cpu_torch_on_a_gpu_host(
    h200_host: dict[str, str], tmp_path: Path
) -> None:
    """.venv holds torch 2.13 CPU; on the H200 host the doctor's fast checks fail (exit 1)."""
    proc = run_on(h200_host, ["--gpus", "2"], tmp_path)
    assert proc.returncode == 1
    assert "pre-flight doctor checks failed: cpu-torch-on-gpu-host" in proc.stderr
    assert "--skip-checks" in proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_a_gpu_host_whose_driver_hangs_is_refused_not_run_on_cpu(tmp_path: Path) -> None:
    """NVML never answering (a wedged driver) hides the GPUs: that is not a CPU-only host, and a
    plan would quietly fall back to 2 gloo processes with CUDA_VISIBLE_DEVICES=""."""
    fake = tmp_path / "fake_nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(
        "import threading\n\ndef nvmlInit():\n    threading.Event().wait()\n"
    )
    env = launch_env(uuid.uuid4().hex)
    env.update(PYTHONPATH=str(fake), ENVTOOL_NVML_TIMEOUT="0.3")
    for extra in (["--dry-run", "--json"], []):
        proc = run_on(env, extra, tmp_path)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "nvidia-driver: the NVIDIA driver is not answering" in proc.stderr
        assert "dmesg | grep -i xid" in proc.stderr and "gloo" not in proc.stdout
        assert not (tmp_path / "runs").exists()


TEMPLATE_ARGS = [
    "--cpu", "--hidden", "32", "--depth", "1", "--batch-size", "8", "--log-every", "1",
    "--ckpt-every", "0", "--dataset-size", "4000", "--warmup-steps", "1",
]  # fmt: skip


def result_of(text: str) -> dict[str, object]:
    line = [x for x in text.splitlines() if "RESULT {" in x][-1]
    return json.loads(line.split("RESULT ", 1)[1])


@pytest.mark.slow
def test_sigterm_checkpoints_the_ddp_template_and_a_relaunch_resumes_at_that_step(
    tmp_path: Path,
) -> None:
    """Preemption: SIGTERM to envtool reaches every rank of templates/ddp.py, which checkpoint
    at the current step; `envtool launch` again resumes from exactly that step."""
    template = REPO / "templates" / "ddp.py"
    marker = uuid.uuid4().hex
    out = tmp_path / "ckpt"
    args = ["launch", str(template), "--cpu", "--", *TEMPLATE_ARGS, "--out-dir", str(out)]
    proc = start_envtool(
        *args,
        "--max-steps",
        "100000",
        cwd=tmp_path,
        env=launch_env(marker),
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # train a few steps first
            if "step 5 loss" in line:
                break
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=90)
        assert proc.returncode == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert leftovers(marker) == []
    manifest = json.loads((only_run_dir(tmp_path) / "manifest.json").read_text())
    stopped = result_of(
        Path(tmp_path, manifest["rank_logs"]["0"]).with_name("stdout.log").read_text()
    )
    assert stopped["stopped"] == "SIGTERM"
    saved = int(stopped["step"])  # type: ignore[call-overload]
    assert saved >= 5

    again = envtool([*args, "--max-steps", str(saved + 3)], tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"at step {saved}" in again.stdout  # "resumed from …/ckpt.pt at step N"
    final = result_of(again.stdout)
    assert final["start_step"] == saved and final["step"] == saved + 3


@pytest.mark.slow
def test_a_record_decorated_script_reports_through_its_error_file(tmp_path: Path) -> None:
    proc = envtool(["launch", str(SCRIPTS / "record_fail.py"), "--cpu"], tmp_path)
    assert proc.returncode == 1
    assert "rank 1 failed first (exit 1 at " in proc.stderr
    assert "KeyError: 'missing-shard-7'" in proc.stderr
    errors = list(only_run_dir(tmp_path).rglob("error.json"))
    assert [e.parent.name for e in errors] == ["1"]  # torchrun's TORCHELASTIC_ERROR_FILE, rank 1


def test_the_error_file_wins_over_the_log_and_torchrun_dying_falls_back_to_logs(
    tmp_path: Path,
) -> None:
    """read_failure on a run folder laid out as torchrun 2.13 leaves it (captured above)."""
    from envtool.adapters.launch.launcher import read_failure
    from envtool.core.launch_plan import LaunchRequest, plan_launch

    plan = plan_launch(
        LaunchRequest(
            script="t.py", python="py", run_id="r", runs_root=str(tmp_path), cpu=True, free_port=1
        )
    )
    rank1 = Path(plan.log_dir, "r_abc", "attempt_0", "1")
    rank1.mkdir(parents=True)
    (rank1 / "stderr.log").write_text("[default1]:no traceback here\n")
    error = {"message": {"message": "KeyError: 'missing-shard-7'", "extraInfo": {"timestamp": "1"}}}
    (rank1 / "error.json").write_text(json.dumps(error))
    summary = (
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-30_03:35:20\n"
        "  host      : localhost\n  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 9)\n"
        "=" * 60
    )
    failure = read_failure(plan, summary)
    assert failure is not None
    assert (failure.rank, failure.error) == (1, "KeyError: 'missing-shard-7'")
    assert failure.log == str(rank1 / "stderr.log")

    (rank1 / "error.json").unlink()
    (rank1 / "stderr.log").write_text(
        '[default1]:Traceback (most recent call last):\n[default1]:  File "t.py"\n'
        "[default1]:OSError: disk full\n"
    )
    failure = read_failure(plan, "torchrun was killed before its summary")
    assert failure is not None and (failure.rank, failure.error) == (1, "OSError: disk full")


def test_json_run_prints_one_envelope_with_the_manifest(tmp_path: Path) -> None:
    proc = envtool(
        ["launch", str(RANK_FILE), "--cpu", "--json", "--", str(tmp_path / "o")], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    envelope = json.loads(proc.stdout)  # rank output went to stderr, stdout is only JSON
    assert envelope["command"] == "launch" and envelope["exit_code"] == 0
    assert envelope["manifest"]["nproc_per_node"] == 2
    assert "rank 0 step 1" in proc.stderr


@pytest.mark.slow
def test_max_restarts_recovers_from_a_failing_rank(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [str(out), "--fail-rank", "1", "--first-attempt-only"]
    failed = envtool(["launch", str(RANK_FILE), "--cpu", "--", *args], tmp_path)
    assert failed.returncode == 1  # without restarts, the failure ends the job
    restarted = envtool(
        ["launch", str(RANK_FILE), "--cpu", "--max-restarts", "1", "--run-dir", "r2", "--", *args],
        tmp_path,
    )
    assert restarted.returncode == 0, restarted.stderr
    assert {p.name for p in out.iterdir()} == {"rank-0", "rank-1"}
    manifest = json.loads(next((tmp_path / "r2").glob("*/manifest.json")).read_text())
    assert "/attempt_1/" in manifest["rank_logs"]["1"]  # the logs of the attempt that finished
    # the restart is named as it happens, counted at the end and recorded
    assert "envtool: restart 1 of 1: rank 1 failed (exit 1): ValueError: planted" in (
        restarted.stderr
    )
    assert f"{manifest['run_id']} finished after 1 restart" in restarted.stderr
    (restart,) = manifest["restarts"]
    assert (restart["rank"], restart["exitcode"]) == (1, 1)
    assert "/attempt_0/1/" in restart["log"] and restart["error"].startswith("ValueError")
    listed = envtool(["runs", "--run-dir", "r2"], tmp_path)
    assert "finished, restarted 1x" in listed.stdout
    # all.log: a line where the second attempt begins, kept by `logs --rank`
    rank1 = envtool(["logs", "--run-dir", "r2", "--rank", "1"], tmp_path).stdout.splitlines()
    mark = "[envtool] attempt 1: torchrun started every rank again (--max-restarts)"
    assert rank1.count(mark) == 1, rank1
    before, after = rank1[: rank1.index(mark)], rank1[rank1.index(mark) + 1 :]
    assert any("ValueError: planted" in line for line in before), rank1
    assert after[-1] == "[node 0 rank 1] rank 1 done", rank1


def test_manifest_lock_hash_comes_from_the_installers_state_record(tmp_path: Path) -> None:
    from envtool.adapters.install.install_state import envtool_meta_dir
    from envtool.adapters.launch.launcher import read_lock_hash

    assert read_lock_hash(tmp_path) is None  # not an envtool-installed env
    meta = envtool_meta_dir(tmp_path)
    meta.mkdir(parents=True)
    (meta / "state.json").write_text(json.dumps({"lock_sha256": "ab" * 32, "lock_path": "x"}))
    assert read_lock_hash(tmp_path) == "ab" * 32


def test_probe_is_local_address() -> None:
    from envtool.adapters.launch.ports import probe_is_local_address

    assert probe_is_local_address("127.0.0.1")
    assert not probe_is_local_address("192.0.2.1")  # TEST-NET-1: never assigned to a host
    assert not probe_is_local_address("no-such-host.invalid")


def test_a_conda_prefix_is_activated_for_every_rank(tmp_path: Path) -> None:
    """A conda-layout prefix (conda-meta/, an activate.d hook like CUDA packages ship): every
    rank sees the hook's variable and the prefix's bin/ first on PATH, as after `conda activate`."""
    prefix = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    site = next(prefix.glob("lib/python3*/site-packages"))
    here = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    (site / "torch_from_venv.pth").write_text(f"{here}\n")  # this env's torch, without a copy
    (prefix / "conda-meta").mkdir()
    hooks = prefix / "etc" / "conda" / "activate.d"
    hooks.mkdir(parents=True)
    (hooks / "cuda.sh").write_text('export CUDA_LIKE_HOME="$CONDA_PREFIX/cuda"\n')
    out = tmp_path / "out"
    proc = envtool(
        ["launch", str(RANK_FILE), "--cpu", "--prefix", str(prefix), "--"]
        + [str(out), "--env-var", "CUDA_LIKE_HOME"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        "rank-0": f"{prefix}/cuda",
        "rank-1": f"{prefix}/cuda",
    }
    manifest = json.loads((only_run_dir(tmp_path) / "manifest.json").read_text())
    assert manifest["env_prefix"] == str(prefix)
    assert manifest["torch_version"].startswith("2.13")
    assert manifest["python"] == str(prefix / "bin" / "python")


def test_a_failing_on_started_leaves_no_process_running(tmp_path: Path) -> None:
    """If gathering the manifest facts fails while the run is starting, the error propagates
    and torchrun and its workers (in sessions of their own) are stopped, not left unwatched."""
    from envtool.adapters.launch.launcher import apply_launch
    from envtool.core.launch_plan import LaunchPlan

    run_id = "test-" + uuid.uuid4().hex
    pidfile = tmp_path / "worker.pid"
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True)\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    plan = LaunchPlan(
        argv=[sys.executable, "-c", code],
        env_add={"ENVTOOL_RUN_ID": run_id},
        run_id=run_id,
        run_dir=str(tmp_path / "run"),
        log_dir=str(tmp_path / "run" / "logs"),
        backend="gloo",
        nproc_per_node=1,
        nnodes=1,
        node_rank=None,
        rendezvous={},
    )

    def failing() -> None:
        deadline = time.monotonic() + 20
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        raise OSError(28, "No space left on device")

    try:
        with pytest.raises(OSError, match="No space left on device"):
            apply_launch(plan, dict(os.environ), console=io.BytesIO(), on_started=failing)
        deadline = time.monotonic() + 10
        while pids_with_environ(f"ENVTOOL_RUN_ID={run_id}".encode()):
            assert time.monotonic() < deadline, "the run kept going after apply_launch failed"
            time.sleep(0.1)
    finally:
        kill_marked(run_id)


def test_preflight_reads_torch_version_from_the_env_without_importing_it(tmp_path: Path) -> None:
    from envtool.adapters.launch.launcher import read_torch_version

    assert read_torch_version(None) is None
    assert read_torch_version(tmp_path) is None  # no torch installed
    version_py = tmp_path / "lib" / "python3.12" / "site-packages" / "torch" / "version.py"
    version_py.parent.mkdir(parents=True)
    version_py.write_text("__version__: str = '2.7.1+cu126'\ncuda: Optional[str] = '12.6'\n")
    assert read_torch_version(tmp_path) == "2.7.1+cu126"


# --- issue 10: failures named, kills reach every process, hangs bounded, full disks -----------

DDP_FAIL = """
import os, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise ValueError("boom")
dist.barrier()
"""


@pytest.mark.slow
def test_a_rank_failing_after_init_process_group_is_named_with_its_exception(
    tmp_path: Path,
) -> None:
    """init_process_group prefixes each traceback line with "[rank1]: "; the exception line is
    still found (it was dropped: every line looked indented)."""
    script = tmp_path / "ddp_fail.py"
    script.write_text(DDP_FAIL)
    proc = envtool(["launch", str(script), "--cpu"], tmp_path)
    assert proc.returncode == 1
    line = next(x for x in proc.stderr.splitlines() if "failed first" in x)
    assert "rank 1 failed first (exit 1" in line and ": ValueError: boom" in line, proc.stderr


@pytest.mark.slow
def test_a_crash_shows_the_failed_ranks_traceback_and_sends_the_noise_to_the_run_folder(
    tmp_path: Path,
) -> None:
    """Rank 1 raises; rank 0, waiting in a barrier, dies of a secondary gloo error; torchrun
    wraps it all in ChildFailedError. The console: rank 1's own traceback (from its log, though
    only rank 0 is on the console), then envtool's cause line. The wrapper and rank 0's error:
    the run folder only."""
    script = tmp_path / "ddp_fail.py"
    script.write_text(DDP_FAIL)
    proc = envtool(["launch", str(script), "--cpu"], tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    cause = next(i for i, x in enumerate(lines) if "rank 1 failed first" in x)
    assert lines[cause - 4 : cause] == [
        "[rank1]: Traceback (most recent call last):",
        f'[rank1]:   File "{script}", line 5, in <module>',
        '[rank1]:     raise ValueError("boom")',
        "[rank1]: ValueError: boom",
    ], proc.stderr
    assert cause == len(lines) - 1  # the cause is the last word
    for noise in ("ChildFailedError", "Root Cause", "closing signal", "Connection closed"):
        assert noise not in proc.stderr, noise
    run_dir = only_run_dir(tmp_path)
    assert "ChildFailedError" in (run_dir / "launcher.log").read_text()
    assert "[node 0 rank 0] [rank0]: RuntimeError" in (run_dir / "all.log").read_text()


@pytest.mark.parametrize("bind_host", ["127.0.0.1", "0.0.0.0"])
def test_an_explicit_rdzv_endpoint_on_a_busy_port_is_one_line_exit_2(
    tmp_path: Path, bind_host: str
) -> None:
    busy = socket.socket()
    busy.bind((bind_host, 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        proc = envtool(
            ["launch", str(RANK_FILE), "--cpu", "--rdzv-endpoint", f"127.0.0.1:{port}", "--", "o"],
            tmp_path,
        )
    finally:
        busy.close()
    assert proc.returncode == 2, proc.stderr
    assert f"port {port} on 127.0.0.1 is in use — pick another --rdzv-endpoint port or omit it" in (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_an_explicit_free_rdzv_endpoint_still_runs(tmp_path: Path) -> None:
    from envtool.adapters.launch.ports import probe_free_port

    port = probe_free_port()
    out = tmp_path / "o"
    proc = envtool(
        ["launch", str(RANK_FILE), "--cpu", "--rdzv-endpoint", f"127.0.0.1:{port}", "--", str(out)],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} == {"rank-0", "rank-1"}


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (a full disk on demand); skipped where mounting is not allowed."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path, leave_kib: int) -> None:
    """Fill the tiny disk up to `leave_kib` KiB of free space."""
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    (disk / "filler").write_bytes(b"\0" * max(0, free - leave_kib * 1024))


@pytest.mark.slow
@pytest.mark.parametrize("leave_kib", [0, 12], ids=["full-at-start", "fills-mid-run"])
def test_a_full_run_dir_disk_is_one_line_exit_1_naming_the_disk(
    tmp_path: Path, tiny_disk: Path, leave_kib: int
) -> None:
    (tiny_disk / "runs").mkdir()
    fill(tiny_disk, leave_kib)
    marker = uuid.uuid4().hex
    args = [str(tmp_path / "o"), "--steps", "3000"]
    proc = envtool(
        ["launch", str(RANK_FILE), "--cpu", "--run-dir", str(tiny_disk / "runs"), "--", *args],
        tmp_path,
        marker,
        timeout=180,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Exception in thread" not in proc.stderr  # the log copier no longer dies loudly
    ours = [line for line in proc.stderr.splitlines() if line.startswith("envtool: error")]
    assert len(ours) == 1, proc.stderr[-2000:]
    assert "No space left on device" in ours[0] and str(tiny_disk / "runs") in ours[0]
    assert "is full" in ours[0] and "--run-dir on another disk" in ours[0]
    assert leftovers(marker) == []


def wait_for_ranks(ready: Path, proc: subprocess.Popen[str], n: int = 2) -> None:
    deadline = time.monotonic() + 60
    while not all((ready / f"rank-{r}").exists() for r in range(n)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "ranks never started"
        time.sleep(0.1)


def wait_gone(marker: str, bound: float = 120.0) -> list[int]:
    """Poll until no process carries the marker (a generous bound, not a speed check)."""
    deadline = time.monotonic() + bound
    while (left := leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.slow
@pytest.mark.parametrize("deaf", [False, True], ids=["ranks-obey", "ranks-ignore-signals"])
def test_sigkill_of_envtool_takes_torchrun_and_every_rank_with_it(
    tmp_path: Path, deaf: bool
) -> None:
    """No handler of envtool's runs on SIGKILL: the supervisor gets its parent-death signal and
    sends torchrun SIGTERM, which stops its workers (a rank deaf to SIGTERM is SIGKILLed by
    torchrun after 30 s, or by the supervisor after 45 s: under load torchrun was seen stopping
    without killing deaf ranks, then hanging at exit on its log-tail threads)."""
    marker = uuid.uuid4().hex
    ready = tmp_path / "ready"
    args = [
        str(tmp_path / "out"),
        "--steps",
        "100000",
        "--sleep",
        "0.05",
        "--ready-dir",
        str(ready),
    ]
    args += ["--ignore-signals"] if deaf else []
    proc = start_envtool(
        "launch", str(RANK_FILE), "--cpu", "--", *args, cwd=tmp_path, env=launch_env(marker)
    )
    try:
        wait_for_ranks(ready, proc)
        assert len(leftovers(marker)) >= 4  # envtool, torchrun, two ranks
        proc.send_signal(signal.SIGKILL)
        # The pipes close when the last rank is gone: torchrun gives deaf ranks 30 s before its
        # SIGKILL, and on a loaded 2-core CI run its shutdown took over 60 s once (a bound, not
        # a speed check; wait_gone's is 120 s).
        proc.communicate(timeout=180)
        assert wait_gone(marker) == []
        assert not (tmp_path / "out" / "rank-0").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in leftovers(marker):
            os.kill(pid, signal.SIGKILL)


HANG = """
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} start", flush=True)
if rank == 0:  # rank 0 goes on a little, then waits (as in a collective) for the stuck rank 1
    for i in range(3):
        time.sleep(0.2)
        print(f"rank 0 step {i}", flush=True)
time.sleep(600)
"""

RANK0_PRINTS = """
import os, time
rank = int(os.environ["RANK"])
for i in range(int(os.environ.get("STEPS", "30"))):
    time.sleep(0.2)
    if rank == 0:  # the usual "print on rank 0 only": rank 1's log never grows
        print(f"step {i}", flush=True)
"""


@pytest.mark.slow
def test_a_hung_run_is_warned_about_and_stopped_by_hang_timeout(tmp_path: Path) -> None:
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    marker = uuid.uuid4().hex
    proc = envtool(["launch", str(script), "--cpu", "--hang-timeout", "4"], tmp_path, marker)
    assert proc.returncode == 1, proc.stderr
    assert "envtool: warning: no rank's log has grown for" in proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "made no progress" in x)
    assert line.startswith("envtool: rank 1 made no progress for ") and "--hang-timeout 4" in line
    assert "failed first" not in proc.stderr  # not the rank torchrun saw die of our SIGTERM
    manifest = json.loads((only_run_dir(tmp_path) / "manifest.json").read_text())
    assert manifest["failed_rank"] == 1 and manifest["hang"]["rank"] == 1
    assert manifest["exit_code"] == 1
    assert wait_gone(marker) == []


@pytest.mark.slow
def test_a_rank_that_never_prints_is_not_a_hang_while_rank_zero_progresses(
    tmp_path: Path,
) -> None:
    """Rank 1 stays silent far longer than the hang bound while rank 0 prints every 0.2 s: no
    warning, no stop. The bound (10 s, warning at 5 s) leaves rank 0 room for a loaded machine's
    start-up and scheduling gaps; rank 1's 15 s of silence is still three times the warning."""
    script = tmp_path / "quiet.py"
    script.write_text(RANK0_PRINTS)
    env = {**launch_env(uuid.uuid4().hex), "STEPS": "75"}
    proc = envtool(["launch", str(script), "--cpu", "--hang-timeout", "10"], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "made no progress" not in proc.stderr and "warning: no rank" not in proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_shows_envtools_lines_not_torchruns_traceback(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """torchrun answers a forwarded Ctrl-C/SIGTERM with a SignalException traceback of its own
    (and each rank with KeyboardInterrupt's): it reached the console before envtool's summary
    and read as a crash (issue 12 item 8). After envtool's stop, stderr is envtool's lines only:
    what it is doing, then the summary; torchrun's traceback is kept in launcher.log."""
    marker = uuid.uuid4().hex
    ready = tmp_path / "ready"
    args = [str(tmp_path / "out"), "--steps", "2000", "--sleep", "0.05", "--ready-dir", str(ready)]
    proc = start_envtool(
        "launch", str(RANK_FILE), "--cpu", "--", *args, cwd=tmp_path, env=launch_env(marker)
    )
    try:
        wait_for_ranks(ready, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in leftovers(marker):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 128 + sig
    lines = err.splitlines()
    after = lines[next(i for i, x in enumerate(lines) if x.startswith("envtool: run ")) + 1 :]
    name = signal.Signals(sig).name
    assert after[0].startswith(f"envtool: {name}: stopping every rank"), err
    assert after[-1].startswith(f"envtool: stopped by {name}; every rank ended"), err
    assert all(x.startswith("envtool: ") for x in after), err
    assert "Traceback" not in err and "SignalException" not in err
    launcher_log = (only_run_dir(tmp_path) / "launcher.log").read_text()
    assert "SignalException" in launcher_log and "Traceback" in launcher_log  # kept, not lost


def test_after_a_stop_a_rank_traceback_of_a_real_error_still_reaches_the_console(
    tmp_path: Path,
) -> None:
    """Only the tracebacks the stop itself caused are held back (StopConsole)."""
    stop = launcher.StopConsole(tmp_path / "launcher.log")
    feed = [
        b"W1201 torch/distributed/elastic/agent/server/api.py:753] Received 2 death signal\n",
        b"[default0]:Traceback (most recent call last):\n",
        b'[default0]:  File "train.py", line 3, in <module>\n',
        b"[default0]:KeyboardInterrupt\n",
        b"[default1]:saving checkpoint at step 7\n",
        b"[default1]:[rank1]: Traceback (most recent call last):\n",
        b'[default1]:[rank1]:   File "train.py", line 9, in save\n',
        b"[default1]:[rank1]: OSError: [Errno 28] No space left on device\n",
        b"Traceback (most recent call last):\n",
        b"torch.distributed.elastic.multiprocessing.api.SignalException: got signal: 2\n",
    ]
    shown = [line for raw in feed for line in stop.feed(raw, "SIGINT")] + stop.flush()
    assert shown[0].startswith(b"envtool: SIGINT: stopping every rank")
    assert shown[1:] == [feed[4], *feed[5:8]]


def test_hang_timeout_with_slurm_is_refused_not_ignored(tmp_path: Path) -> None:
    proc = envtool(
        ["launch", str(RANK_FILE), "--slurm", "--nodes", "1", "--cpu", "--hang-timeout", "60"],
        tmp_path,
    )
    assert proc.returncode == 2 and "--hang-timeout watches a local run" in proc.stderr


@pytest.mark.parametrize(
    ("nnodes", "node_rank", "expected"),
    [(1, None, "rank 1"), (2, 1, "rank 5"), (2, None, "local rank 1 on this node")],
)
def test_progress_watch_names_the_rank_silent_longest(
    tmp_path: Path, nnodes: int, node_rank: int | None, expected: str
) -> None:
    """Logs laid out as torchrun leaves them; rank 1 stopped writing first, rank 0 later."""
    from envtool.adapters.launch.launcher import ProgressWatch
    from envtool.core.launch_plan import LaunchRequest, plan_launch

    plan = plan_launch(
        LaunchRequest(
            script="t.py", python="py", run_id="r", runs_root=str(tmp_path), cpu=True,
            nproc=4, free_port=1, nnodes=nnodes, node_rank=node_rank,
            rdzv_endpoint="10.0.0.1:29400" if nnodes > 1 else None,
        )
    )  # fmt: skip
    now = time.time()
    for local, age in ((0, 40.0), (1, 90.0), (2, 50.0), (3, 45.0)):
        rank_dir = Path(plan.log_dir, "r_x", "attempt_0", str(local))
        rank_dir.mkdir(parents=True)
        for name in ("stdout.log", "stderr.log"):
            (rank_dir / name).write_text("x")
            os.utime(rank_dir / name, (now - age, now - age))
    said: list[str] = []
    alive = {local: "S" for local in range(4)}.copy  # four live workers, none stopped
    watch = ProgressWatch(plan, hang_timeout=30.0, say=said.append, read_states=lambda _: alive())
    assert watch.check() is True
    assert watch.hang is not None and watch.hang.label == expected
    assert watch.hang.all_silent >= 40.0 and watch.hang.rank_silent >= 90.0
    assert said and f"({expected} silent longest)" in said[0]
    quiet = ProgressWatch(plan, hang_timeout=None, say=said.append)  # default: warn only
    assert quiet.check() is False and quiet.hang is None


@pytest.mark.slow
def test_a_hang_timeout_stop_ends_with_envtools_lines_not_torchruns_traceback(
    tmp_path: Path,
) -> None:
    """--hang-timeout is a stop envtool makes (its SIGTERM to torchrun): the console gets
    envtool's lines, not torchrun's SignalException traceback (kept in launcher.log)."""
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    proc = envtool(["launch", str(script), "--cpu", "--hang-timeout", "4"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    stopping = next(i for i, x in enumerate(lines) if "envtool: --hang-timeout: stopping" in x)
    assert "made no progress" in lines[-1] and stopping < len(lines) - 1
    assert all(x.startswith("envtool: ") for x in lines[stopping:]), proc.stderr
    assert "Traceback" not in proc.stderr and "SignalException" not in proc.stderr
    assert "SignalException" in (only_run_dir(tmp_path) / "launcher.log").read_text()
