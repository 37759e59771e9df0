"""The launch plan: what `envtool launch` will run, computed without running it.

Like torchrun's `config_from_args()`: a request (flags + facts the command gathered) becomes a
plain `LaunchPlan` (argv + environment additions + paths) that `--dry-run` prints and the
launcher applies. Pure: no I/O, no os.environ (the caller passes the environment it sees).
Also parses what torchrun leaves behind after a failure (its "Root Cause" block, rank logs).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from envtool.errors import UsageError

# NVLink SHARP / multicast is disabled on many shared clusters and VMs; NCCL and torch's
# symmetric memory then fail at init instead of falling back. Off by default, user may override.
GPU_ENV_DEFAULTS: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
}
CPU_DEFAULT_NPROC = 2  # the smallest count that still exercises the distributed code path
RUN_MARKER_VAR = "ENVTOOL_RUN_ID"  # every process of a run carries it: how cleanup finds them


@dataclass
class LaunchRequest:
    """Everything the plan depends on: the user's flags plus facts gathered by the command."""

    script: str
    python: str
    run_id: str
    runs_root: str  # "runs" or --run-dir
    script_args: list[str] = field(default_factory=list)
    gpus: str | None = None  # "all" | "N" | None (= all visible on a GPU host)
    nproc: int | None = None
    cpu: bool = False
    visible_gpus: int = 0  # GPUs this host shows after CUDA_VISIBLE_DEVICES
    cuda_visible_devices: str | None = None  # as set in the caller's environment
    cpu_count: int = 1
    nnodes: int = 1
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    free_port: int | None = None  # chosen by envtool for single-node runs
    endpoint_is_local: bool = False  # the rendezvous endpoint is an address of this machine
    local_addr: str | None = None  # the address other nodes reach this one by (multi-NIC hosts)
    max_restarts: int = 0
    all_ranks: bool = False
    environ: dict[str, str] = field(default_factory=dict)  # the environment ranks inherit


@dataclass
class LaunchPlan:
    argv: list[str]
    env_add: dict[str, str]  # set on top of the inherited (activated) environment
    run_id: str
    run_dir: str
    log_dir: str
    backend: str  # nccl | gloo
    nproc_per_node: int
    nnodes: int
    node_rank: int | None
    rendezvous: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    max_restarts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_endpoint(value: str) -> tuple[str, int]:
    """HOST:PORT → (host, port); a bad value is a usage error naming the flag."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(
            f"--rdzv-endpoint {value!r} is not HOST:PORT",
            "give the head node and a port, e.g. --rdzv-endpoint 10.0.0.1:29400",
        )
    return host.strip("[]"), int(port)


def parse_gpus(value: str | None) -> int | str | None:
    """`--gpus` accepts a positive count or `all`."""
    if value is None or value == "all":
        return value
    if value.isascii() and value.isdigit() and int(value) > 0:  # isdigit alone admits '²'
        return int(value)
    raise UsageError(
        f"--gpus {value!r} is not a count", "pass a number like --gpus 4, or --gpus all"
    )


def render_run_id(stamp: str, token: str) -> str:
    """`20261130-031600-a1b2c3`: sorts by time, unique across concurrent launches."""
    return f"{stamp}-{token}"


def plan_nproc(req: LaunchRequest) -> tuple[int, str]:
    """How many local processes and which backend; refuses more GPUs than the host shows."""
    gpus = parse_gpus(req.gpus)
    if req.cpu or (req.visible_gpus == 0 and gpus is None):
        if isinstance(gpus, int) and req.nproc and gpus != req.nproc:
            raise UsageError("--gpus and --nproc disagree", "give one of them")
        n = req.nproc or (gpus if isinstance(gpus, int) else CPU_DEFAULT_NPROC)
        return n, "gloo"
    if req.visible_gpus == 0:
        raise UsageError(
            f"asked for {req.gpus} GPUs; this host shows none"
            + _cvd_suffix(req.cuda_visible_devices),
            "run on a GPU node, or pass --cpu to launch CPU processes (gloo)",
        )
    if isinstance(gpus, int) and req.nproc and gpus != req.nproc:
        raise UsageError(f"--gpus {gpus} and --nproc {req.nproc} disagree", "give one of them")
    wanted = req.nproc or (gpus if isinstance(gpus, int) else req.visible_gpus)
    if wanted > req.visible_gpus:
        raise UsageError(
            f"asked for {wanted} GPUs; this host shows {req.visible_gpus}"
            + _cvd_suffix(req.cuda_visible_devices),
            f"pass --gpus {req.visible_gpus} or fewer, or unset/widen CUDA_VISIBLE_DEVICES",
        )
    return wanted, "nccl"


def _cvd_suffix(cvd: str | None) -> str:
    return f" (CUDA_VISIBLE_DEVICES={cvd})" if cvd is not None else ""


def plan_rendezvous(req: LaunchRequest) -> tuple[list[str], dict[str, Any]]:
    """torchrun flags for rendezvous.

    - one node: c10d on 127.0.0.1 with a port envtool found free (29500 may be taken);
    - many nodes with --node-rank: static rendezvous (`--master-addr/--master-port`): ranks
      follow node order exactly, the most deterministic choice (reproducible runs, tests);
    - many nodes without --node-rank: c10d dynamic rendezvous, nodes join in any order and
      --max-restarts can re-form the group; the run id is shared by all nodes.
    """
    if req.nnodes < 1:
        raise UsageError(f"--nnodes {req.nnodes} must be at least 1", "pass --nnodes 1 or more")
    if req.nnodes == 1 and req.rdzv_endpoint is None:
        if req.free_port is None:
            raise UsageError("no free port for the rendezvous", "pass --rdzv-endpoint HOST:PORT")
        endpoint = f"127.0.0.1:{req.free_port}"
        flags = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", req.run_id]
        return flags, {"kind": "c10d", "endpoint": endpoint, "id": req.run_id}
    if req.rdzv_endpoint is None:
        raise UsageError(
            f"--nnodes {req.nnodes} needs --rdzv-endpoint HOST:PORT",
            "name the head node every node can reach, e.g. --rdzv-endpoint 10.0.0.1:29400",
        )
    host, port = parse_endpoint(req.rdzv_endpoint)
    if req.node_rank is not None:
        if not 0 <= req.node_rank < req.nnodes:
            raise UsageError(
                f"--node-rank {req.node_rank} is outside 0..{req.nnodes - 1}",
                "number nodes from 0 (the head node) to --nnodes minus 1",
            )
        flags = [
            "--node-rank",
            str(req.node_rank),
            "--master-addr",
            host,
            "--master-port",
            str(port),
        ]
        return flags, {"kind": "static", "endpoint": f"{host}:{port}", "id": None}
    rid = req.rdzv_id or "envtool-" + re.sub(r"[^A-Za-z0-9]+", "-", f"{host}-{port}")
    flags = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{host}:{port}", "--rdzv-id", rid]
    if req.endpoint_is_local:
        # torchrun only recognises the host by hostname; an interface IP must be said outright
        flags += ["--rdzv-conf", "is_host=1"]
    return flags, {"kind": "c10d", "endpoint": f"{host}:{port}", "id": rid}


def plan_env(req: LaunchRequest, nproc: int, backend: str) -> tuple[dict[str, str], list[str]]:
    """Environment additions, never overriding what the user set (and saying so)."""
    add: dict[str, str] = {RUN_MARKER_VAR: req.run_id}
    notes: list[str] = []
    if "OMP_NUM_THREADS" in req.environ:
        notes.append(f"OMP_NUM_THREADS={req.environ['OMP_NUM_THREADS']} kept (set by you)")
    else:
        add["OMP_NUM_THREADS"] = str(max(1, req.cpu_count // max(1, nproc)))
    if "PYTHONUNBUFFERED" not in req.environ:
        add["PYTHONUNBUFFERED"] = "1"  # rank output reaches logs and console as it happens
    if backend == "gloo":
        add["CUDA_VISIBLE_DEVICES"] = ""  # --cpu means no rank touches a GPU
    else:
        for key, value in GPU_ENV_DEFAULTS.items():
            if key in req.environ:
                notes.append(f"{key}={req.environ[key]} kept (set by you)")
            else:
                add[key] = value
    return add, notes


def plan_launch(req: LaunchRequest) -> LaunchPlan:
    """Flags + facts → the exact torchrun command and environment."""
    if req.max_restarts < 0:
        raise UsageError(f"--max-restarts {req.max_restarts} is negative", "pass 0 or more")
    nproc, backend = plan_nproc(req)
    rdzv_flags, rendezvous = plan_rendezvous(req)
    env_add, notes = plan_env(req, nproc, backend)
    run_dir = f"{req.runs_root.rstrip('/')}/{req.run_id}"
    log_dir = f"{run_dir}/torchrun"
    argv = [
        req.python,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(req.nnodes),
        "--nproc-per-node",
        str(nproc),
        *rdzv_flags,
        "--max-restarts",
        str(req.max_restarts),
        "--log-dir",
        log_dir,
        "--tee",
        "3",  # every rank's stdout+stderr to its log file, and to the console...
    ]
    if not req.all_ranks:
        argv += ["--local-ranks-filter", "0"]  # ...but only local rank 0 on the console
    if req.local_addr:
        argv += ["--local-addr", req.local_addr]
    argv += [req.script, *req.script_args]
    return LaunchPlan(
        argv=argv,
        env_add=env_add,
        run_id=req.run_id,
        run_dir=run_dir,
        log_dir=log_dir,
        backend=backend,
        nproc_per_node=nproc,
        nnodes=req.nnodes,
        node_rank=req.node_rank,
        rendezvous=rendezvous,
        notes=notes,
        max_restarts=req.max_restarts,
    )


def render_dry_run(plan: LaunchPlan) -> list[str]:
    """The exact command and the environment additions, copy-pasteable."""
    from envtool.core.shell_quote import join_posix, printable, quote_posix

    lines = ["# environment added to the activated environment:"]
    lines += [f"export {k}={quote_posix(v)}" for k, v in plan.env_add.items()]
    # a note quotes the caller's variables: a newline there must not start a command line
    lines += [f"# {printable(n)}" for n in plan.notes]
    lines += ["# command:", join_posix(plan.argv)]
    return lines


# --- after the run: who failed first, and why -------------------------------------------------


@dataclass
class RankFailure:
    rank: int
    local_rank: int | None
    exitcode: int | None
    time: str | None  # "2026-11-30_03:16:14" as torchrun prints it
    host: str | None = None
    error: str | None = None  # "ValueError: boom"
    log: str | None = None


_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):(?P<body>.*?)(?:={20,}|\Z)", re.S)


def parse_root_cause(text: str) -> RankFailure | None:
    """torchrun's own summary of the first failed rank (printed to its stderr on failure)."""
    matches = list(_ROOT_CAUSE.finditer(text))
    if not matches:
        return None
    body = matches[-1].group("body")  # the last attempt's summary

    def field_(name: str) -> str | None:
        m = re.search(rf"^\s*{name}\s*:\s*(.*?)\s*$", body, re.M)
        return m.group(1) if m else None

    rank_text = field_("rank") or ""
    m = re.match(r"(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?", rank_text)
    if not m:
        return None
    code_text = field_("exitcode") or ""
    cm = re.match(r"(-?\d+)", code_text)
    return RankFailure(
        rank=int(m.group(1)),
        local_rank=int(m.group(2)) if m.group(2) else None,
        exitcode=int(cm.group(1)) if cm else None,
        time=field_("time"),
        host=field_("host"),
    )


def parse_last_exception(log_text: str) -> str | None:
    """The exception line closing the last traceback in a rank's stderr log."""
    idx = log_text.rfind("Traceback (most recent call last):")
    if idx < 0:
        return None
    for line in log_text[idx:].splitlines()[1:]:
        line = _LINE_PREFIX.sub("", line)
        if line and not line.startswith((" ", "\t")) and not line.startswith("Traceback"):
            return line.strip()
    return None


def parse_last_lines(log_text: str, count: int = 10, limit: int = 300) -> list[str]:
    """The last non-empty lines of a rank's stderr log, rank prefixes removed: what a rank that
    exited with a code said without a traceback (`sys.exit("fatal: …")`, argparse's error, a
    template's own check); its last line is the cause."""
    lines: list[str] = []
    for raw in reversed(log_text.splitlines()[-200:]):
        line = _LINE_PREFIX.sub("", raw).rstrip()
        if line.strip():
            lines.append(line[:limit])
            if len(lines) == count:
                break
    return lines[::-1]


def parse_last_traceback(log_text: str, max_lines: int = 20) -> list[str]:
    """The last traceback in a rank's stderr log, from its `Traceback` line to its exception
    line, rank prefixes removed; a longer one keeps its first line and its last lines (the
    frames nearest the error). [] when the log holds none (a rank killed by a signal)."""
    idx = log_text.rfind("Traceback (most recent call last):")
    if idx < 0:
        return []
    idx = log_text.rfind("\n", 0, idx) + 1  # the whole line, its prefixes included
    lines: list[str] = []
    for raw in log_text[idx:].splitlines():
        line = _LINE_PREFIX.sub("", raw)
        lines.append(line)
        if len(lines) > 1 and line and not line.startswith((" ", "\t", "Traceback")):
            break  # the exception line closes it
    if len(lines) > max_lines:
        lines = [lines[0], "  ...", *lines[-(max_lines - 2) :]]
    return lines


# Prefixes in front of a rank's lines: torchrun's tee "[default1]:" (no space) and the
# excepthook init_process_group installs, "[rank1]: " (one space) — either or both. Only that
# one space goes: a traceback's own indentation ("  File …") must stay to be told apart.
_LINE_PREFIX = re.compile(r"^(?:\[[A-Za-z_]*\d+\]: ?)+")


def parse_error_file(data: dict[str, Any]) -> tuple[str | None, str | None]:
    """TORCHELASTIC_ERROR_FILE written by `@record`: (exception line, timestamp)."""
    message = data.get("message")
    if isinstance(message, dict):
        text = str(message.get("message") or "")
        ts = (message.get("extraInfo") or {}).get("timestamp")
        return (text.splitlines()[0] if text else None), (str(ts) if ts else None)
    if isinstance(message, str):
        return message.splitlines()[0], None
    return None, None


# torchrun's agent logs one such line each time a worker group fails (the first failure of it)
_ATTEMPT_FAILED = re.compile(r"failed \(exitcode: (-?\d{1,9})\) local_rank: (\d{1,9}) ")


def parse_attempt_failures(text: str) -> list[tuple[int, int]]:
    """(local rank, exit code) of each worker group's failure in torchrun's stderr, in order:
    under --max-restarts, the k-th one ended attempt k."""
    return [(int(m.group(2)), int(m.group(1))) for m in _ATTEMPT_FAILED.finditer(text)]


def render_restart(failure: RankFailure, number: int, max_restarts: int) -> str:
    """ "restart 1 of 2: rank 1 failed (exit 1): ValueError: boom — torchrun started every rank
    again; its logs: runs/…/attempt_0/1/stderr.log"."""
    how = f" ({_render_how(failure)})" if failure.exitcode is not None else ""
    text = f"restart {number} of {max_restarts}: rank {failure.rank} failed{how}"
    if failure.error:
        text += f": {failure.error}"
    text += " — torchrun started every rank again"
    return text + (f"; its logs: {failure.log}" if failure.log else "")


def render_attempt_mark(attempt: int) -> str:
    """all.log's line where torchrun's attempt N begins (`envtool logs --rank R` keeps it)."""
    return f"[envtool] attempt {attempt}: torchrun started every rank again (--max-restarts)"


def render_restarts(count: int) -> str:
    return f"after {count} restart{'s' if count != 1 else ''}"


def _render_how(failure: RankFailure) -> str:
    if failure.exitcode is not None and failure.exitcode < 0:
        return f"killed by {_signal_name(-failure.exitcode)}"
    return f"exit {failure.exitcode}" if failure.exitcode is not None else "failed"


def render_failure(failure: RankFailure) -> str:
    """ "rank 1 failed first (exit 1 at 03:16:14): ValueError: boom — logs: runs/…/stderr.log"."""
    how = _render_how(failure)
    when = f" at {failure.time.split('_')[-1]}" if failure.time else ""
    text = f"rank {failure.rank} failed first ({how}{when})"
    if failure.error:
        text += f": {failure.error}"
    elif failure.exitcode == -9:  # nobody asked for it (a Ctrl-C is SIGINT/SIGTERM first)
        text += (
            ": most often the kernel's out-of-memory killer (check `dmesg`); try a smaller "
            "model or batch, or fewer processes"
        )
    if failure.log:
        text += f" — logs: {failure.log}"
    return text


def _signal_name(num: int) -> str:
    import signal

    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
