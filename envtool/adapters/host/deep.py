"""`doctor --deep`: run real GPU work in the target environment's python and collect the numbers.

The work itself lives in deep_script.py, executed by the target python (never imported here, so
envtool never imports torch). This module only builds argv lists, runs them with a Runner and reads
the JSON each step writes. Failures come back as data ({"error": ...}); nothing here raises.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envtool.adapters.proc import ProcResult, Runner, run_capture
from envtool.core.launch_plan import GPU_ENV_DEFAULTS, RUN_MARKER_VAR

DEEP_SCRIPT = Path(__file__).with_name("deep_script.py")

# The launch defaults (NVLS and multicast off), forced here rather than defaulted: the check
# measures plain NCCL whatever the user's shell sets.
CHILD_ENV = dict(GPU_ENV_DEFAULTS)


def child_environ(base: Mapping[str, str], cpu: bool) -> dict[str, str]:
    env = dict(base)
    env.update(CHILD_ENV)
    env.setdefault("OMP_NUM_THREADS", "1")
    if cpu:
        env["ENVTOOL_DEEP_CPU"] = "1"
    else:
        env.pop("ENVTOOL_DEEP_CPU", None)
    return env


def plan_matmul(python: str, out: str, size: int, cpu: bool) -> list[str]:
    argv = [python, str(DEEP_SCRIPT), "matmul", out, "--size", str(size)]
    return argv + (["--cpu"] if cpu else [])


def plan_allreduce(python: str, out: str, nproc: int) -> list[str]:
    # --standalone: a local c10d rendezvous on a free port (no fixed 29500 to collide with).
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        str(DEEP_SCRIPT),
        "allreduce",
        out,
    ]


def run_group(
    argv: list[str], timeout: float = 300.0, env: Mapping[str, str] | None = None
) -> ProcResult:
    """run_capture for torchrun: its own process group, so a hung all-reduce is ended with all
    its worker processes (killing torchrun alone would orphan workers that hold the GPUs).
    torchrun starts each worker in a session of its own, out of the group's reach, so every
    process also carries a marker in its environment and a time-out kills those found by it
    (they hold our output pipes too: left alive, reading the output would wait on them)."""
    from envtool.adapters.launch.launcher import kill_run

    run_id = f"deep-{os.getpid()}-{uuid.uuid4().hex}"
    child_env = dict(os.environ if env is None else env)
    child_env[RUN_MARKER_VAR] = run_id
    return run_capture(
        argv,
        timeout=timeout,
        env=child_env,
        new_session=True,
        kill=lambda proc: kill_run(proc.pid, run_id),
    )


def _read_json(path: Path, part: str) -> dict[str, Any] | None:
    """What the step wrote: None when it wrote nothing; {"error": …} when it wrote something
    that is not a result (the env's python is not trusted to write the format)."""
    from envtool.adapters.files import RECORDING_LIMIT, read_bytes
    from envtool.core.facts import check_deep_record
    from envtool.core.safe_load import parse_json
    from envtool.errors import UsageError

    if not path.exists():
        return None
    try:
        data = parse_json(read_bytes(path, RECORDING_LIMIT), path.name)
        return check_deep_record({part: data}, path.name)[part]
    except UsageError as exc:
        return {"error": f"unreadable result: {exc.message}"}


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def probe_deep(
    python: str,
    gpu_count: int,
    cpu: bool = False,
    runner: Runner = run_group,
    environ: Mapping[str, str] | None = None,
    size: int | None = None,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Run the matmul check then, with ≥ 2 devices, the all-reduce. Returns
    {"matmul": {...} | None, "allreduce": {...} | None, "skipped": reason | None}.

    cpu=True exercises the same code paths on CPU (gloo, 2 processes, small sizes) for tests.
    """
    if gpu_count < 1 and not cpu:
        return {"matmul": None, "allreduce": None, "skipped": "no GPU visible to torch"}
    env = child_environ(os.environ if environ is None else environ, cpu)
    out: dict[str, Any] = {"matmul": None, "allreduce": None, "skipped": None}
    with tempfile.TemporaryDirectory(prefix="envtool-deep-") as tmp:
        mm_out = Path(tmp) / "matmul.json"
        argv = plan_matmul(python, str(mm_out), size or (256 if cpu else 4096), cpu)
        proc = runner(argv, timeout=timeout, env=env)
        mm = _read_json(mm_out, "matmul")
        if mm is None:
            mm = {"error": _failure(proc, "matmul")}
        out["matmul"] = mm
        nproc = 2 if cpu else int(mm.get("device_count") or gpu_count)
        if nproc < 2:
            out["allreduce"] = {"skipped": f"all-reduce needs ≥ 2 GPUs; {nproc} visible"}
            return out
        ar_out = Path(tmp) / "allreduce.json"
        proc = runner(plan_allreduce(python, str(ar_out), nproc), timeout=timeout, env=env)
        ar = _read_json(ar_out, "allreduce")
        if ar is None or not proc.ok:
            ar = dict(ar or {})
            ar["error"] = _failure(proc, "all-reduce")
        out["allreduce"] = ar
    return out


def _failure(proc: Any, what: str) -> str:
    if getattr(proc, "timed_out", False):
        return f"{what} timed out (a hang in NCCL init or a collective)"
    if getattr(proc, "missing", False):
        return f"{what}: cannot run {proc.argv[0]}"
    return f"{what} exited {proc.returncode}: {_tail(proc.stderr or proc.stdout)}"
