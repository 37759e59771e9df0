"""Render a Slurm batch script that runs one torchrun launcher per node. Pure: text in, text out.

Choices (documented in README.md):
- `--ntasks-per-node=1`: one torchrun per node; torchrun starts the node's ranks.
- c10d rendezvous on the first node of the allocation, run id = $SLURM_JOB_ID, so nodes join in
  any order and --max-restarts can re-form the group. The port is derived from the job id, so
  two jobs sharing a head node do not collide and every node computes the same value.
- `--signal=TERM@120` (no `B:`): Slurm sends SIGTERM to the job *steps* 120 s before the time
  limit, i.e. to torchrun and the training processes started by srun, which can checkpoint.
  With `B:` only the batch shell would get it, and bash defers traps while srun runs.
- `--requeue`: `--signal=B:USR1@120` goes to the batch shell instead, which runs srun in the
  background and waits, so its trap runs at once: it sends SIGTERM to the job steps (`scancel
  --signal=TERM $SLURM_JOB_ID`: steps only — srun itself answers a SIGTERM by SIGKILLing its
  tasks), the ranks checkpoint and exit, and the shell requeues the job (`scontrol requeue`)
  while $SLURM_RESTART_COUNT is under the cap. The requeued job runs the same script: same run
  folder, same checkpoint directory, and the templates resume from it (`--resume auto`, their
  default). A SIGTERM that reaches the batch step (a preemption, `scancel --full`) reaches srun
  too, which then SIGKILLs its tasks before they can checkpoint (measured on Slurm 22+, and
  starting srun with SIGTERM ignored does not stop it); the shell still requeues the job, which
  resumes from the last periodic checkpoint (--ckpt-every). `requeues.log` in the run folder
  keeps the history of every start, signal, end and requeue.
- NCCL_NVLS_ENABLE=0 / TORCH_SYMM_MEM_DISABLE_MULTICAST=1 unless already set: NVLink SHARP /
  multicast is disabled on many shared clusters and NCCL then fails at init.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envtool.core.launch_plan import CPU_DEFAULT_NPROC, GPU_ENV_DEFAULTS, RUN_MARKER_VAR
from envtool.core.shell_quote import join_posix, quote_posix

SIGNAL_LEAD_SECONDS = 120
# the multi-node pre-flight's shared secret (adapters/launch/preflight_script.TOKEN_VAR)
PREFLIGHT_TOKEN_VAR = "ENVTOOL_PREFLIGHT_TOKEN"


@dataclass
class SlurmRequest:
    script: str  # absolute: compute nodes start in the submit directory, be explicit
    python: str
    run_dir: str
    job_name: str
    nodes: int
    script_args: list[str] = field(default_factory=list)
    prefix: str | None = None
    is_conda: bool = False
    gpus_per_node: int | None = None
    cpu: bool = False
    nproc: int | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    cpus_per_task: int | None = None
    max_restarts: int = 0
    workdir: str | None = None
    activation: str | None = None  # the env's activation script (rattler), when available
    requeue: bool = False  # checkpoint and requeue on the time-limit signal or a preemption
    max_requeues: int = 3
    preflight_script: str | None = None  # adapters/launch/preflight_script.py's text (multi-node)
    rdzv_timeout: float = 60.0


def plan_nproc_per_node(req: SlurmRequest) -> int:
    if req.cpu:
        return req.nproc or CPU_DEFAULT_NPROC
    return req.nproc or req.gpus_per_node or 1


# sbatch --time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (and "infinite")
_SLURM_TIME = re.compile(r"^(\d+-\d{1,2}(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2}|infinite|unlimited)$")


def parse_slurm_time(text: str) -> str:
    """Validate an sbatch --time value here, not minutes later when sbatch rejects the job."""
    value = text.strip()
    if not _SLURM_TIME.match(value):
        raise ValueError(
            f"--time {text!r} is not a Slurm time limit: use MM, HH:MM:SS or D-HH:MM:SS"
        )
    return value


# what a value in a `#SBATCH --opt=VALUE` line may hold: sbatch splits these lines itself (not
# a shell) and a newline would end the comment, so anything else is refused, never escaped
_DIRECTIVE_VALUE = re.compile(r"[A-Za-z0-9._,+@:/-]+")
# the per-node command: a constant, so no value is ever inside it. Values arrive as positional
# words ($1 python, $2 log root, then torchrun's options, the script and its arguments), quoted
# once by join_posix in the batch shell; $SLURM_NODEID differs per node, so it expands here,
# in each task's bash, not in the batch shell
_NODE_COMMAND = (
    'exec "$1" -m torch.distributed.run --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID"'
    ' --rdzv-endpoint "$ENVTOOL_RDZV_ENDPOINT" --rdzv-id "$SLURM_JOB_ID"'
    ' --log-dir "$2/node-$SLURM_NODEID" "${@:3}"'
)


# GPU jobs without --nproc: one rank per GPU Slurm gave *this* node (SLURM_GPUS_ON_NODE, else
# the count of CUDA_VISIBLE_DEVICES), so a node given fewer GPUs (a partial or heterogeneous
# allocation) starts fewer ranks instead of failing on a missing device; $3 is the count asked
# for, used when Slurm says nothing usable. c10d gives ranks out by what each node brings.
_NODE_COMMAND_PER_NODE_GPUS = (
    'n="${SLURM_GPUS_ON_NODE:-}"; '
    'if [ -z "$n" ] && [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then '
    'IFS=, read -ra gpus <<< "$CUDA_VISIBLE_DEVICES"; n=${#gpus[@]}; fi; '
    'case "$n" in ""|0|*[!0-9]*) n=$3;; esac; '
    'exec "$1" -m torch.distributed.run --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID"'
    ' --rdzv-endpoint "$ENVTOOL_RDZV_ENDPOINT" --rdzv-id "$SLURM_JOB_ID"'
    ' --log-dir "$2/node-$SLURM_NODEID" --nproc-per-node "$n" "${@:4}"'
)


def check_directive_value(option: str, value: str) -> str:
    """`value` for `#SBATCH --option=value`, or ValueError naming the option."""
    if not _DIRECTIVE_VALUE.fullmatch(value):
        raise ValueError(
            f"{option} {value!r}: only letters, digits and . _ , + @ : / - can go in an "
            "#SBATCH line"
        )
    return value


def job_name_from(text: str) -> str:
    """A job name sbatch accepts from any script name: other characters become '_'."""
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)[:128] or "job"


def _output_directive(run_dir: str) -> str:
    """--output for the run dir: single-quoted (sbatch honours quotes) when it holds spaces;
    '%' doubled, as Slurm reads %j & co. in the name. No quotes, backslashes or control
    characters: sbatch's own splitting would not keep them."""
    if re.search(r"[\x00-\x1f\x7f'\"\\]", run_dir):
        raise ValueError(
            f"--run-dir {run_dir!r}: a Slurm output path cannot hold quotes, backslashes or "
            "control characters"
        )
    path = run_dir.replace("%", "%%") + "/slurm-%j.out"
    return quote_posix(path)


def render_sbatch(req: SlurmRequest) -> str:
    """The whole job script: #SBATCH header, activation, head-node discovery, one srun.
    Every value is one word made by quote_posix/join_posix; ValueError for a value that cannot
    go in an #SBATCH line."""
    q = quote_posix
    nproc = plan_nproc_per_node(req)
    cpus = req.cpus_per_task or max(1, nproc * (1 if req.cpu else 4))
    lines = [
        "#!/bin/bash",
        "# generated by `envtool launch --slurm`; one torchrun launcher per node",
        f"#SBATCH --job-name={check_directive_value('--job-name', req.job_name)}",
        f"#SBATCH --nodes={int(req.nodes)}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={int(cpus)}",
    ]
    if not req.cpu:
        lines.append(f"#SBATCH --gpus-per-node={int(req.gpus_per_node or nproc)}")
    if req.time:
        lines.append(f"#SBATCH --time={check_directive_value('--time', req.time)}")
    if req.partition:
        lines.append(f"#SBATCH --partition={check_directive_value('--partition', req.partition)}")
    if req.account:
        lines.append(f"#SBATCH --account={check_directive_value('--account', req.account)}")
    if req.requeue:  # the batch shell traps it, signals the steps and requeues the job
        lines += [
            f"#SBATCH --signal=B:USR1@{SIGNAL_LEAD_SECONDS}",
            "#SBATCH --requeue",
            "#SBATCH --open-mode=append",  # one output file across requeues (same job id)
        ]
    else:
        lines.append(f"#SBATCH --signal=TERM@{SIGNAL_LEAD_SECONDS}")
    lines += [
        f"#SBATCH --output={_output_directive(req.run_dir)}",
        "",
        "# the environment, as `conda activate` / a venv's activate would set it",
        "# (before `set -u`: activation scripts of CUDA packages read unset variables)",
    ]
    if req.activation:
        lines += req.activation.rstrip("\n").split("\n")
    elif req.prefix:
        var = "CONDA_PREFIX" if req.is_conda else "VIRTUAL_ENV"
        lines += [
            f"export {var}={q(req.prefix)}",
            f'export PATH={q(req.prefix + "/bin")}:"$PATH"',
        ]
        if req.is_conda:
            lines += [
                f"for hook in {q(req.prefix)}/etc/conda/activate.d/*.sh; do",
                '  if [ -f "$hook" ]; then . "$hook"; fi',
                "done",
            ]
    lines += ["", "set -euo pipefail"]
    if req.workdir:
        lines.append(f"cd {q(req.workdir)}")
    lines.append(f'export {RUN_MARKER_VAR}={q(req.job_name + "-")}"$SLURM_JOB_ID"')
    if req.cpu:
        lines += ['export CUDA_VISIBLE_DEVICES=""', "export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}"]
    else:
        for key, value in GPU_ENV_DEFAULTS.items():
            lines.append(f"export {key}=${{{key}:-{value}}}  # multicast/NVLS off unless set")
        per_rank = max(1, cpus // nproc)
        lines.append(f"export OMP_NUM_THREADS=${{OMP_NUM_THREADS:-{per_rank}}}")
    lines += [
        "export PYTHONUNBUFFERED=1",
        "",
        "# rendezvous on the allocation's first node; port derived from the job id",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "port=$((20000 + SLURM_JOB_ID % 20000))",
        f"mkdir -p {q(req.run_dir)}",
        "",
    ]
    per_node_gpus = not req.cpu and req.nproc is None
    words = [
        req.python,
        f"{req.run_dir}/torchrun",
        *([] if per_node_gpus else ["--nproc-per-node"]),
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--max-restarts",
        str(req.max_restarts),
        "--tee",
        "3",
        "--local-ranks-filter",
        "0",
        req.script,
        *req.script_args,
    ]
    srun = "srun --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c " + join_posix(
        [_NODE_COMMAND_PER_NODE_GPUS if per_node_gpus else _NODE_COMMAND, "envtool-node", *words]
    )
    lines.append('export ENVTOOL_RDZV_ENDPOINT="$head:$port"')
    if req.preflight_script and req.nodes > 1:
        lines += [
            "# pre-flight: every node reaches the head on the rendezvous port and has its torch,",
            "# CUDA, NCCL and lock hash, or every node stops here in seconds with one line",
            "# (torchrun alone would wait 900 s); `envtool launch --skip-checks` leaves it out.",
            "# Its messages carry an HMAC under a secret made here for this job (and each",
            "# requeue): srun hands it to the pre-flight's tasks in their environment, never in",
            "# a file or on a command line, so nobody else reaching the port can take part",
            "preflight_token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n')",
            f'{PREFLIGHT_TOKEN_VAR}="$preflight_token" srun --export=ALL --kill-on-bad-exit=1 '
            "--ntasks-per-node=1 "
            + join_posix([req.python, "-I", "-c", req.preflight_script])
            + f' "$head" "$port" "$SLURM_NNODES" {float(req.rdzv_timeout):g}',
            "unset preflight_token",
        ]
    if not req.requeue:
        lines.append(srun)
        return "\n".join(lines) + "\n"
    history = q(req.run_dir + "/requeues.log")
    lines += [
        f"max_requeues={int(req.max_requeues)}",
        "restarts=${SLURM_RESTART_COUNT:-0}",
        "export ENVTOOL_REQUEUE_COUNT=$restarts  # for the training script, if it cares",
        'say() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) job $SLURM_JOB_ID restart $restarts: $*" '
        f">> {history}; }}",
        'say "start on $SLURM_JOB_NODELIST"',
        'stop_signal=""',
        "on_stop() {  # USR1: the time limit is near; TERM: preemption or scancel",
        '  if [ -z "$stop_signal" ]; then',
        '    stop_signal=$1; say "got SIG$1: the ranks checkpoint and stop"',
        '    scancel --signal=TERM "$SLURM_JOB_ID" || true  # the steps, not this shell',
        "  fi",
        "}",
        "trap 'on_stop USR1' USR1",
        "trap 'on_stop TERM' TERM",
        srun + " &",
        "step=$!",
        "while :; do  # a trapped signal ends `wait` early; wait again until srun is done",
        '  rc=0; wait "$step" || rc=$?',
        '  kill -0 "$step" 2>/dev/null || break',
        "done",
        'say "srun ended (exit $rc)"',
        'if [ -n "$stop_signal" ]; then',
        '  if [ "$restarts" -lt "$max_requeues" ]; then',
        '    say "requeued ($((restarts + 1)) of $max_requeues)"',
        "    for try in 1 2 3 4 5; do  # refused while the step is still being cleaned up",
        '      if scontrol requeue "$SLURM_JOB_ID"; then exit 0; fi',
        "      sleep $((try * 2))",
        "    done",
        '    say "scontrol requeue failed"',
        "    exit 1",
        "  fi",
        '  say "not requeued: --max-requeues $max_requeues reached"',
        "fi",
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def parse_job_id(sbatch_stdout: str) -> str | None:
    """`Submitted batch job 42` (or `--parsable`'s `42;cluster`) → "42"."""
    m = re.search(r"Submitted batch job (\d+)", sbatch_stdout) or re.match(
        r"^\s*(\d+)(?:;\S+)?\s*$", sbatch_stdout
    )
    return m.group(1) if m else None
