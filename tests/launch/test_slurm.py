"""`envtool launch --slurm`: the batch script's content (pure), and a real one-node Slurm
(Debian slurm-wlm + munge, started by a session fixture) running a `--cpu` job to completion."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from envtool.core.slurm import SlurmRequest, parse_job_id, parse_slurm_time, render_sbatch

RANK_FILE = str(REPO / "tests" / "scripts" / "rank_file.py")


def slurm_req(**kw: object) -> SlurmRequest:
    base: dict[str, object] = dict(
        script="/proj/train.py",
        python="/envs/torch/bin/python",
        run_dir="/proj/runs/r1",
        job_name="train",
        nodes=2,
        gpus_per_node=8,
        prefix="/envs/torch",
        is_conda=True,
        script_args=["--lr", "0.1", "--name", "a b"],
        time="02:00:00",
        partition="gpu",
        account="proj1",
    )
    base.update(kw)
    return SlurmRequest(**base)  # type: ignore[arg-type]


def sbatch_directives(text: str) -> dict[str, str]:
    return dict(
        (line[len("#SBATCH --") :].split("=", 1) + [""])[:2]  # a flag (--requeue) reads as ""
        for line in text.splitlines()
        if line.startswith("#SBATCH --")
    )


def test_header_asks_for_one_launcher_per_node_and_the_gpus() -> None:
    d = sbatch_directives(render_sbatch(slurm_req()))
    assert d["nodes"] == "2"
    assert d["ntasks-per-node"] == "1"
    assert d["gpus-per-node"] == "8"
    assert d["cpus-per-task"] == "32"
    assert d["time"] == "02:00:00" and d["partition"] == "gpu" and d["account"] == "proj1"
    assert d["signal"] == "TERM@120"  # to the steps (torchrun + ranks), not only the batch shell
    assert d["output"] == "/proj/runs/r1/slurm-%j.out"


@pytest.mark.integration
def test_body_activates_the_env_and_runs_torchrun_with_c10d_on_the_head_node() -> None:
    text = render_sbatch(slurm_req())
    assert 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in text
    assert "export CONDA_PREFIX=/envs/torch" in text
    assert 'export PATH=/envs/torch/bin:"$PATH"' in text
    assert "export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}" in text
    assert "export TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}" in text
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert srun.startswith("srun --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c ")
    # the per-node command and its words, as each task's bash will see them
    cmd = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + srun.split("bash -c ", 1)[1]],
        capture_output=True,
        text=True,
    )
    inner_text, _name, *words = cmd.stdout.split("\0")[:-1]
    for part in (
        '"$1" -m torch.distributed.run',
        '--nnodes "$SLURM_NNODES"',
        '--node-rank "$SLURM_NODEID"',  # expanded per task, not once in the batch shell
        '--rdzv-endpoint "$ENVTOOL_RDZV_ENDPOINT"',
        '--rdzv-id "$SLURM_JOB_ID"',
        '--log-dir "$2/node-$SLURM_NODEID"',
        '--nproc-per-node "$n"',  # the GPUs Slurm gave this node; "8" (below) when it says none
    ):
        assert part in inner_text, part
    assert words == [
        "/envs/torch/bin/python",
        "/proj/runs/r1/torchrun",
        *("8", "--rdzv-backend", "c10d", "--max-restarts", "0"),
        *("--tee", "3", "--local-ranks-filter", "0"),
        *("/proj/train.py", "--lr", "0.1", "--name", "a b"),
    ]


def node_command_argv(text: str, tmp_path: Path, env: dict[str, str]) -> list[str]:
    """Run the srun line's per-node command under bash as a task would, with a stand-in
    python that prints the torchrun argv it was given."""
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf \'%s\\n\' "$a"; done\n')
    fake.chmod(0o755)
    words = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + srun.split("bash -c ", 1)[1]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")[:-1]
    inner, name, _python, *rest = words
    base = {"PATH": os.environ["PATH"], "SLURM_NNODES": "2", "SLURM_NODEID": "1"}
    base |= {"ENVTOOL_RDZV_ENDPOINT": "h:1", "SLURM_JOB_ID": "5"}
    out = subprocess.run(
        ["bash", "-c", inner, name, str(fake), *rest],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.splitlines()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("env", "nproc"),
    [
        ({"SLURM_GPUS_ON_NODE": "3"}, "3"),  # this node got 3 of the 8 asked for
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, "2"),  # no SLURM_GPUS_ON_NODE: count the devices
        ({"SLURM_GPUS_ON_NODE": "a100:2"}, "8"),  # not a count: the number asked for
        ({}, "8"),
    ],
)
def test_gpu_ranks_per_node_follow_what_slurm_gave_the_node(
    tmp_path: Path, env: dict[str, str], nproc: str
) -> None:
    argv = node_command_argv(render_sbatch(slurm_req()), tmp_path, env)
    assert argv[argv.index("--nproc-per-node") + 1] == nproc
    assert argv.count("--nproc-per-node") == 1
    assert argv[-5:] == ["/proj/train.py", "--lr", "0.1", "--name", "a b"]
    # --nproc pins the count, and --cpu has no GPUs to count
    for req in (slurm_req(nproc=4), slurm_req(cpu=True, gpus_per_node=None, nproc=4)):
        pinned = node_command_argv(render_sbatch(req), tmp_path, env)
        assert pinned[pinned.index("--nproc-per-node") + 1] == "4"


@pytest.mark.integration
def test_script_is_valid_bash() -> None:
    for req in (slurm_req(), slurm_req(cpu=True, gpus_per_node=None, prefix=None)):
        proc = subprocess.run(
            ["bash", "-n"], input=render_sbatch(req), capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr


def test_cpu_jobs_ask_for_no_gpu_and_hide_them() -> None:
    text = render_sbatch(slurm_req(cpu=True, gpus_per_node=None, nproc=3))
    assert "gpus-per-node" not in sbatch_directives(text)
    assert 'export CUDA_VISIBLE_DEVICES=""' in text
    assert "--nproc-per-node 3" in text
    assert "NCCL_NVLS_ENABLE" not in text


def test_a_venv_prefix_sets_virtual_env() -> None:
    text = render_sbatch(slurm_req(prefix="/proj/.venv", is_conda=False))
    assert "export VIRTUAL_ENV=/proj/.venv" in text
    assert "activate.d" not in text


def test_parse_job_id() -> None:
    assert parse_job_id("Submitted batch job 4242\n") == "4242"
    assert parse_job_id("4242;cluster\n") == "4242"
    assert parse_job_id("sbatch: error: invalid partition") is None


def launch_slurm(cwd: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess:
    """`envtool launch RANK_FILE --slurm ARGS` in a fresh process, in cwd."""
    argv = [sys.executable, "-m", "envtool", "launch", RANK_FILE, "--slurm", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, **kw)


@pytest.mark.integration
def test_slurm_dry_run_prints_the_script_and_writes_nothing(tmp_path: Path) -> None:
    proc = launch_slurm(tmp_path, "--nodes", "2", "--gpus-per-node", "4", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert "#SBATCH --gpus-per-node=4" in data["script"]
    assert not (tmp_path / "runs").exists()


@pytest.mark.integration
def test_slurm_without_gpus_per_node_is_exit_2(tmp_path: Path) -> None:
    proc = launch_slurm(tmp_path, "--nodes", "2")
    assert proc.returncode == 2
    assert "--gpus-per-node" in proc.stderr


@pytest.mark.integration
def test_a_run_dir_that_is_a_file_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "runs").touch()
    proc = launch_slurm(tmp_path, "--nodes", "1", "--gpus-per-node", "1", "--run-dir", "runs")
    assert proc.returncode == 2
    assert "cannot create the run folder" in proc.stderr and "Traceback" not in proc.stderr


# --- a real Slurm -------------------------------------------------------------------------------


def _free_ports(n: int) -> list[int]:
    """n distinct free ports (all held open while choosing, so they cannot repeat)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[dict[str, str]]:
    """munged + slurmctld + slurmd for this host, all state in a temp dir; torn down at the end.

    Yields the environment (SLURM_CONF) slurm commands need."""
    missing = [
        p for p in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol") if not shutil.which(p)
    ]
    if missing:
        pytest.skip(
            f"Slurm not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
        )
    if os.geteuid() != 0:
        pytest.skip("the test Slurm runs its daemons as root (SlurmUser=root)")
    root = Path(tempfile.mkdtemp(prefix="envtool-slurm-"))
    host = socket.gethostname().split(".")[0]
    munge = root / "munge"
    for d in (munge, root / "state", root / "spool"):
        d.mkdir(mode=0o700)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = munge / "munge.sock"
    conf = root / "slurm.conf"
    template = f"""ClusterName=envtooltest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldPort={{ctld}}
SlurmdPort={{slurmd}}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen[bytes]] = []
    munged = subprocess.run(
        ["munged", "--force", f"--socket={sock}", f"--key-file={key}"]
        + [f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log"]
        + [f"--seed-file={munge}/munge.seed"],
        capture_output=True,
        text=True,
    )
    try:
        if munged.returncode != 0:
            pytest.skip(f"munged would not start: {munged.stderr.strip()}")
        reason = ""
        for _attempt in range(3):  # a port taken between choosing and binding: choose again
            ctld, slurmd = _free_ports(2)
            conf.write_text(template.format(ctld=ctld, slurmd=slurmd))
            for daemon in ("slurmctld", "slurmd"):
                log = open(root / f"{daemon}.out", "ab")  # noqa: SIM115 - closed with the daemon
                daemons.append(
                    subprocess.Popen(
                        [daemon, "-D", "-f", str(conf)], env=env, stdout=log, stderr=log
                    )
                )
            reason = _wait_for_idle_node(env, daemons, root)
            if not reason:
                break
            _stop(daemons)
            daemons.clear()
        else:
            pytest.skip(f"Slurm did not come up: {reason}")
        yield env
    finally:
        _stop(daemons)
        pid_file = munge / "munged.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_idle_node(
    env: dict[str, str], daemons: list[subprocess.Popen[bytes]], root: Path
) -> str:
    """'' once sinfo shows the node idle; else why not (daemon logs)."""
    deadline = time.monotonic() + 30
    while True:
        info = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
        if info.returncode == 0 and info.stdout.strip() in ("idle", "mix", "alloc"):
            return ""
        if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
            logs = "".join(
                (root / f).read_text(errors="replace")[-800:]
                for f in ("slurmctld.log", "slurmd.log")
                if (root / f).exists()
            )
            return f"sinfo={info.stdout.strip()!r} {logs}"
        time.sleep(0.5)


def _stop(daemons: list[subprocess.Popen[bytes]]) -> None:
    for d in daemons:
        if d.poll() is None:
            d.send_signal(signal.SIGTERM)
    for d in daemons:
        try:
            d.wait(timeout=15)
        except subprocess.TimeoutExpired:
            d.kill()
            d.wait()


def wait_for_job(job_id: str, env: dict[str, str], timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    state = "?"
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True
        ).stdout
        m = re.search(r"JobState=(\S+)", out)
        state = m.group(1) if m else "?"
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return state
        time.sleep(0.5)
    return f"still {state} after {timeout}s"


@pytest.mark.slow
@pytest.mark.integration
def test_a_cpu_job_runs_to_completion_on_a_real_slurm(
    slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = launch_slurm(
        tmp_path,
        "--cpu",
        "--nodes",
        "1",
        "--submit",
        "--json",
        "--",
        str(out),
        "--steps",
        "2",
        env={**slurm_cluster, "OMP_NUM_THREADS": "1"},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    job_id = data["job_id"]
    assert job_id and job_id.isdigit()
    assert Path(data["sbatch_path"]).is_file()
    state = wait_for_job(job_id, slurm_cluster)
    output = Path(data["sbatch_path"]).with_name(f"slurm-{job_id}.out")
    assert state == "COMPLETED", output.read_text() if output.exists() else state
    assert {p.name for p in out.iterdir()} == {"rank-0", "rank-1"}
    log = output.read_text()
    assert "rank 0 step 2" in log and "rank 1 step" not in log  # rank 0 on the console
    node_logs = list((output.parent / "torchrun" / "node-0").rglob("stdout.log"))
    assert len(node_logs) == 2  # every rank's log kept, per node


@pytest.mark.integration
def test_gpus_reads_as_gpus_per_node_for_slurm(tmp_path: Path) -> None:
    proc = launch_slurm(
        tmp_path, "--nodes", "2", "--gpus", "8", "--time", "01:00:00", "--partition", "gpu"
    )
    assert proc.returncode == 0, proc.stderr
    sbatch = next((tmp_path / "runs").glob("*/job.sbatch")).read_text()
    assert "#SBATCH --gpus-per-node=8" in sbatch and "torchrun 8 --rdzv-backend" in sbatch
    assert "submit with: sbatch " in proc.stdout


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--gpus", "all"], "--slurm --gpus all"),
        (["--gpus", "0"], "--gpus '0' is not a count"),
        (["--gpus", "eight"], "--gpus 'eight' is not a count"),
        (["--gpus", "4", "--gpus-per-node", "8"], "--gpus 4 and --gpus-per-node 8 disagree"),
    ],
)
def test_slurm_gpus_that_cannot_be_a_per_node_count_are_refused(
    tmp_path: Path, args: list[str], said: str
) -> None:
    proc = launch_slurm(tmp_path, "--nodes", "2", *args, "--dry-run")
    assert proc.returncode == 2
    assert said in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.integration
def test_conda_activation_runs_its_hooks_before_strict_mode(tmp_path: Path) -> None:
    """The batch script activates a conda prefix the way `conda activate` does (rattler's
    script, activate.d hooks included) — before `set -u`, which such hooks often trip."""
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "bin").mkdir()
    hooks = prefix / "etc" / "conda" / "activate.d"
    hooks.mkdir(parents=True)
    (hooks / "cuda.sh").write_text(
        'export CUDA_LIKE_HOME="$CONDA_PREFIX/cuda"; : "$NOT_SET_ANYWHERE"\n'
    )
    proc = launch_slurm(
        tmp_path, "--cpu", "--nodes", "1", "--prefix", str(prefix), "--dry-run", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    script = json.loads(proc.stdout)["script"]
    head, _ = script.split("set -euo pipefail", 1)
    env = {k: v for k, v in os.environ.items() if k not in ("CONDA_PREFIX", "NOT_SET_ANYWHERE")}
    shown = subprocess.run(
        ["bash", "-c", head + '\nset -u; echo "$CUDA_LIKE_HOME|${PATH%%:*}"'],
        env=env,
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"{prefix}/cuda|{prefix}/bin"


@pytest.mark.parametrize("value", ["30", "30:00", "02:00:00", "1-12", "1-12:00", "1-12:00:00"])
def test_slurm_time_accepts_sbatch_formats(value: str) -> None:
    assert parse_slurm_time(value) == value


@pytest.mark.parametrize("value", ["abc", "2h", "1:2:3:4", "-5"])
def test_slurm_time_rejects_what_sbatch_would(value: str) -> None:
    with pytest.raises(ValueError, match="Slurm time limit"):
        parse_slurm_time(value)


def test_output_path_with_spaces_is_quoted_plain_one_unchanged() -> None:
    plain = render_sbatch(slurm_req())
    assert "#SBATCH --output=/proj/runs/r1/slurm-%j.out\n" in plain
    spaced = render_sbatch(slurm_req(run_dir="/proj/my runs/r1"))
    assert "#SBATCH --output='/proj/my runs/r1/slurm-%j.out'\n" in spaced


# --- --requeue ----------------------------------------------------------------------------------

DDP = str(REPO / "templates" / "ddp.py")
# the ddp template on 2 CPU ranks, every step logged (the last logged loss is the last step's)
DDP_ARGS = ["--cpu", "--max-steps", "150", "--log-every", "1", "--ckpt-every", "0"]


@pytest.mark.integration
def test_requeue_script_traps_the_signal_signals_the_steps_and_requeues_under_the_cap() -> None:
    text = render_sbatch(slurm_req(requeue=True, max_requeues=2))
    d = sbatch_directives(text)
    assert d["signal"] == "B:USR1@120" and d["open-mode"] == "append" and d["requeue"] == ""
    assert "trap 'on_stop USR1' USR1" in text and "trap 'on_stop TERM' TERM" in text
    assert 'scancel --signal=TERM "$SLURM_JOB_ID"' in text  # the steps, not srun's SIGKILL
    assert "max_requeues=2" in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert "/proj/runs/r1/requeues.log" in text
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "B:USR1" not in render_sbatch(slurm_req())  # without --requeue: as before


@pytest.mark.integration
@pytest.mark.parametrize(("restarts", "requeued"), [(0, True), (1, True), (2, False)])
def test_requeue_shell_logic_with_stand_ins_for_srun_and_scontrol(
    tmp_path: Path, restarts: int, requeued: bool
) -> None:
    """The batch script itself under bash, srun/scancel/scontrol replaced by tiny scripts: USR1
    to the shell signals the step, waits for it, and requeues only under --max-requeues."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "calls"
    stubs = {
        "srun": f'echo $$ > {tmp_path}/srun.pid; trap "exit 0" TERM; while :; do sleep 0.1; done',
        "scancel": f'echo "scancel $*" >> {calls}; kill -TERM "$(cat {tmp_path}/srun.pid)"',
        "scontrol": f'if [ "$1" = show ]; then echo node1; else echo "scontrol $*" >> {calls}; fi',
    }
    for name, body in stubs.items():
        (fake / name).write_text(f"#!/bin/bash\n{body}\n")
        (fake / name).chmod(0o755)
    run_dir = tmp_path / "run"
    text = render_sbatch(
        slurm_req(requeue=True, max_requeues=2, run_dir=str(run_dir), cpu=True, prefix=None)
    )
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_NNODES": "1",
        "SLURM_RESTART_COUNT": str(restarts),
    }
    shell = subprocess.Popen(["bash", "-c", text], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "srun.pid").exists():
            assert shell.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        shell.send_signal(signal.SIGUSR1)
        assert shell.wait(timeout=30) == 0
    finally:
        if shell.poll() is None:
            shell.kill()
    made = calls.read_text().splitlines()
    assert made[0] == "scancel --signal=TERM 7"
    assert ("scontrol requeue 7" in made) is requeued
    history = (run_dir / "requeues.log").read_text()
    assert f"restart {restarts}: got SIGUSR1" in history
    assert ("--max-requeues 2 reached" in history) is not requeued


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--requeue"], "--requeue requeues a Slurm job"),
        (["--slurm", "--nodes", "1", "--requeue", "--", "--resume", "never"], "--resume never"),
        (["--slurm", "--nodes", "1", "--requeue", "--", "--resume=never"], "--resume never"),
        (["--slurm", "--nodes", "1", "--requeue", "--max-requeues", "-1"], "--max-requeues"),
    ],
)
def test_requeue_refuses_what_cannot_resume(tmp_path: Path, args: list[str], said: str) -> None:
    argv = [sys.executable, "-m", "envtool", "launch", DDP, "--cpu", *args]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr


def _result(text: str) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if "RESULT " in line]
    assert lines, text[-2000:]
    return json.loads(lines[-1].split("RESULT ", 1)[1])


def _wait_for_text(
    path: Path, needle: str, timeout: float = 300, env: dict[str, str] | None = None
) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if needle in text:
            return text
        time.sleep(0.2)
    # say why: the job's state (pending behind another job, a node marked down under load)
    state = subprocess.run(["squeue", "-a", "-l"], capture_output=True, text=True, env=env)
    raise AssertionError(
        f"{needle!r} not in {path} after {timeout}s; squeue: {state.stdout}{state.stderr}"
    )


def _release_requeued(job_id: str, env: dict[str, str], timeout: float = 60) -> None:
    """Start the requeued job in a few seconds rather than Slurm's couple of minutes. Not at
    once: slurmd refuses a job credential issued in the same second the job was revoked
    (requeued) — "Job credential revoked" — so the start is 3 s after the requeue."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True
        ).stdout
        if "Restarts=0" not in out and "JobState=PENDING" in out:
            subprocess.run(
                ["scontrol", "update", f"JobId={job_id}", "StartTime=now+3"],
                env=env,
                capture_output=True,
            )
            return
        time.sleep(0.2)


def _submit_requeue_job(
    env: dict[str, str], tmp_path: Path, launch_args: list[str], script_args: list[str]
) -> tuple[str, Path, Path]:
    """`envtool launch ddp.py --slurm --requeue --submit` on the test cluster: (job id, run
    folder, the job's slurm-<id>.out)."""
    proc = subprocess.run(
        [sys.executable, "-m", "envtool", "launch", DDP, "--slurm", "--cpu", "--nodes", "1"]
        + ["--nproc", "2", "--requeue", *launch_args, "--submit", "--json", "--"]
        + [*DDP_ARGS, *script_args, "--out-dir", str(tmp_path / "ckpt")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    run_dir = Path(data["sbatch_path"]).parent
    return data["job_id"], run_dir, run_dir / f"slurm-{data['job_id']}.out"


@pytest.fixture(scope="module")
def ddp_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The RESULT of the same ddp run, uninterrupted, through a plain `envtool launch`."""
    tmp_path = tmp_path_factory.mktemp("ddp-reference")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    reference = subprocess.run(
        [sys.executable, "-m", "envtool", "launch", DDP, "--cpu", "--nproc", "2"]
        + ["--run-dir", str(tmp_path / "ref-runs"), "--", *DDP_ARGS]
        + ["--out-dir", str(tmp_path / "ref-ckpt")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert reference.returncode == 0, reference.stderr
    expected = _result(reference.stdout)
    assert expected["step"] == 150 and expected["start_step"] == 0
    return expected


@pytest.mark.slow
@pytest.mark.integration
def test_a_requeued_job_checkpoints_resumes_and_ends_like_an_uninterrupted_run(
    slurm_cluster: dict[str, str], tmp_path: Path, ddp_reference: dict[str, Any]
) -> None:
    """The ddp template as a --requeue job: signalled as Slurm signals a job near its time
    limit (USR1 to the batch shell: `scancel --batch --signal=USR1`, the same path Slurm's
    --signal=B:USR1@120 takes, triggered when the job is mid-run instead of waiting minutes),
    it checkpoints, requeues itself, resumes at the saved step and ends with the same step and
    loss as the same run uninterrupted."""
    env = {**slurm_cluster, "OMP_NUM_THREADS": "1"}
    expected = ddp_reference
    job_id, run_dir, output = _submit_requeue_job(
        env, tmp_path, ["--time", "10", "--max-requeues", "2"], []
    )
    _wait_for_text(output, "step 10 loss", env=env)  # mid-run: well before step 150
    signalled = subprocess.run(
        ["scancel", "--batch", "--signal=USR1", job_id], env=env, capture_output=True, text=True
    )
    assert signalled.returncode == 0, signalled.stderr
    _wait_for_text(run_dir / "requeues.log", "requeued (1 of 2)", env=env)
    # Slurm holds a requeued batch job ~2 minutes (its begin time); release it now
    _release_requeued(job_id, env)
    state = wait_for_job(job_id, slurm_cluster, timeout=240)
    log = output.read_text(errors="replace")
    history = (run_dir / "requeues.log").read_text()
    job = subprocess.run(
        ["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True
    )
    assert state == "COMPLETED", f"{state}\n{job.stdout}\n{history}\n{log[-3000:]}"
    # first run: stopped by the signal after a checkpoint; second: resumed from it
    first, second = (_result(part) for part in log.split("resumed from", 1))
    assert first["stopped"] == "SIGTERM" and 10 <= first["step"] < 150, first
    assert f"at step {first['step']}" in log.split("resumed from", 1)[1].splitlines()[0]
    assert second["start_step"] == first["step"]
    assert (second["step"], second["loss"]) == (expected["step"], expected["loss"])
    assert "restart 0: got SIGUSR1" in history and "requeued (1 of 2)" in history
    assert "restart 1: start" in history and "restart 1: srun ended (exit 0)" in history
    # one run folder across the requeue, listed by `envtool runs`
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [run_dir.name]
    runs = subprocess.run(
        [sys.executable, "-m", "envtool", "runs", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    (row,) = json.loads(runs.stdout)["runs"]
    assert row["job_id"] == job_id and row["status"] == "finished, requeued 1x"


@pytest.mark.slow
@pytest.mark.integration
def test_a_preempted_job_is_requeued_and_resumes_from_its_last_periodic_checkpoint(
    slurm_cluster: dict[str, str], tmp_path: Path, ddp_reference: dict[str, Any]
) -> None:
    """SIGTERM to the whole batch step, as a preemption sends it (`scancel --full`): srun kills
    its tasks before they can checkpoint (Slurm's behaviour), but the trap still requeues the
    job and it resumes from the last periodic checkpoint (--ckpt-every 5), ending like an
    uninterrupted run."""
    env = {**slurm_cluster, "OMP_NUM_THREADS": "1"}
    job_id, run_dir, output = _submit_requeue_job(
        env, tmp_path, ["--max-requeues", "1"], ["--ckpt-every", "5"]
    )
    _wait_for_text(output, "step 12 loss", env=env)  # the step-10 checkpoint is on disk
    subprocess.run(["scancel", "--full", "--signal=TERM", job_id], env=env, check=True)
    _wait_for_text(run_dir / "requeues.log", "requeued (1 of 1)", env=env)
    _release_requeued(job_id, env)
    state = wait_for_job(job_id, slurm_cluster, timeout=240)
    history = (run_dir / "requeues.log").read_text()
    log = output.read_text(errors="replace")
    assert state == "COMPLETED", f"{state}\n{history}\n{log[-3000:]}"
    assert "restart 0: got SIGTERM" in history and "restart 1: srun ended (exit 0)" in history
    final = _result(log)
    assert final["start_step"] >= 10 and final["start_step"] % 5 == 0, final
    assert (final["step"], final["loss"]) == (ddp_reference["step"], ddp_reference["loss"])


# --- multi-node pre-flight in the batch script -------------------------------------------------


# srun as the pre-flight step uses it: one task per node (SLURM_NODEID 0, 1), each with the
# environment srun was given; node 1 may run another python ($NODE1_PYTHON)
SRUN_STAND_IN = """
srun() {
  while [[ $1 == --* ]]; do shift; done
  printf '%s' "$ENVTOOL_PREFLIGHT_TOKEN" > "$OUT/token"
  SLURM_NODEID=0 "$@" 2> "$OUT/0.err" & a=$!
  SLURM_NODEID=1 "${NODE1_PYTHON:-$1}" "${@:2}" 2> "$OUT/1.err" & b=$!
  ra=0; wait "$a" || ra=$?; rb=0; wait "$b" || rb=$?
  echo "$ra $rb" > "$OUT/rc"
}
"""


def run_preflight_nodes(tmp_path: Path, pythons: list[str]) -> list[subprocess.CompletedProcess]:
    """The batch script's pre-flight lines for 2 nodes, run by bash as written (the token made
    there, srun a stand-in starting each node's task with the environment it was given), with
    $head/$port set to this host: each node's exit code and stderr."""
    from envtool.adapters.launch.preflight import script_source

    req = slurm_req(cpu=True, gpus_per_node=None, python=pythons[0])
    req.preflight_script = script_source()
    req.rdzv_timeout = 10
    text = render_sbatch(req)
    start = text.index("preflight_token=$(")
    end = text.index("unset preflight_token", start)
    (port,) = _free_ports(1)
    out = tmp_path / "preflight"
    out.mkdir()
    env = {"PATH": os.environ["PATH"], "OUT": str(out), "NODE1_PYTHON": pythons[1]}
    body = f"set -euo pipefail\nhead=127.0.0.1 port={port} SLURM_NNODES=2\n{text[start:end]}"
    subprocess.run(["bash", "-c", SRUN_STAND_IN + body], env=env, check=True, timeout=60)
    codes = (out / "rc").read_text().split()
    token = (out / "token").read_text()
    assert len(token) == 64 and token not in text  # made by the job, per job: 256 random bits
    return [
        subprocess.CompletedProcess([], int(codes[i]), "", (out / f"{i}.err").read_text())
        for i in range(2)
    ]


@pytest.mark.integration
def test_the_batch_scripts_pre_flight_passes_nodes_that_agree(tmp_path: Path) -> None:
    for proc in run_preflight_nodes(tmp_path, [sys.executable, sys.executable]):
        assert proc.returncode == 0, proc.stderr


@pytest.mark.integration
def test_the_batch_scripts_pre_flight_stops_every_node_when_one_lacks_torch(tmp_path: Path) -> None:
    """Node 1's python is a bare venv (no torch): the environment's python on each node runs
    the check, so both stop with the one line naming node 1."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    import torch

    results = run_preflight_nodes(tmp_path, [sys.executable, str(bare / "bin" / "python")])
    for proc in results:
        assert proc.returncode == 1
        (line,) = proc.stderr.strip().splitlines()
        assert (
            f"pre-flight: node 1 (127.0.0.1) has torch none, the head has {torch.__version__}"
            in line
        )


@pytest.mark.integration
def test_one_node_and_skip_checks_have_no_pre_flight(tmp_path: Path) -> None:
    one = launch_slurm(tmp_path, "--cpu", "--nodes", "1", "--dry-run", "--json")
    two = launch_slurm(tmp_path, "--cpu", "--nodes", "2", "--dry-run", "--json")
    skip = launch_slurm(tmp_path, "--cpu", "--nodes", "2", "--skip-checks", "--dry-run", "--json")
    assert "pre-flight" in json.loads(two.stdout)["script"]
    assert "pre-flight" not in json.loads(one.stdout)["script"]
    assert "pre-flight" not in json.loads(skip.stdout)["script"]
