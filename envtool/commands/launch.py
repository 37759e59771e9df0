"""`envtool launch`: run a training script through torchrun inside an environment.

parse flags → pre-flight (torch present, GPUs visible, doctor's fast checks) → plan
(core.launch_plan) → multi-node pre-flight (adapters.launch.preflight: every node reaches the
head, same torch/CUDA/NCCL/lock) → run (adapters.launch.launcher; all.log merges every rank) → manifest +
"which rank failed first".
`--slurm` writes (and with --submit, submits) a batch script instead (core.slurm).
"""

from __future__ import annotations

import os
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envtool.commands import renders, resolve_and_say, say_target, target_data
from envtool.core.credentials import redact_secret_args
from envtool.core.slurm import PREFLIGHT_TOKEN_VAR
from envtool.errors import DiagnosedFailure, UsageError
from envtool.output import Result, note

if TYPE_CHECKING:
    from envtool.core.facts import HostFacts


# One node runs at most this many ranks: each is a python process with torch loaded (hundreds of
# MB) and, on GPUs, its own CUDA context; 100000 forked the host to a halt instead of failing.
MAX_NPROC = 1024


def _bounded_nproc(value: int | None) -> int | None:
    if value is not None and value > MAX_NPROC:
        raise UsageError(
            f"--nproc {value}: more than {MAX_NPROC} processes on one node "
            "(each is a python with torch loaded)",
            f"pass --nproc {MAX_NPROC} or fewer; spread a larger run over --nnodes",
        )
    return value


class _LaunchCommand(click.Command):
    """torchrun passes everything after the script to it; envtool takes its own options on
    both sides of the script, so the script's go after `--`. An unknown option says so."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            name = exc.option_name.split("=", 1)[0]
            example = "envtool launch train.py --gpus 4 -- " + name + " …"
            raise click.UsageError(
                f"{exc.format_message()} If it is the training script's, put it after `--`: "
                f"{example}",
                ctx,
            ) from None


@click.command(
    "launch",
    cls=_LaunchCommand,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--gpus",
    "--nproc-per-node",
    "--nproc_per_node",  # torchrun's spellings, as torchrun users type them
    "gpus",
    default=None,
    help="GPUs (processes) on this node: a count or 'all' (torchrun: --nproc-per-node).",
)
@click.option(
    "--standalone",
    is_flag=True,
    hidden=True,
    help="torchrun's flag, accepted: one node is standalone unless --nnodes is more than 1.",
)
@click.option("-n", "--name", default=None, help="Environment name.")
@click.option("-p", "--prefix", default=None, help="Environment prefix path.")
@click.option("--python", "python_path", default=None, help="The environment's python.")
@click.option("--cpu", is_flag=True, help="CPU processes with gloo; ranks see no GPU.")
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    default=None,
    callback=lambda _ctx, _param, value: _bounded_nproc(value),
    help=f"Processes per node (at most {MAX_NPROC}).",
)
@click.option("--nnodes", type=click.IntRange(min=1), default=None, help="Number of nodes.")
@click.option(
    "--node-rank", "--node_rank", type=click.IntRange(min=0), default=None, help="This node's rank."
)
@click.option(
    "--rdzv-endpoint", "--rdzv_endpoint", default=None, help="HOST:PORT of the head node."
)
@click.option(
    "--rdzv-id", "--rdzv_id", default=None, help="Run id shared by all nodes (c10d rendezvous)."
)
@click.option(
    "--local-addr",
    "--local_addr",
    default=None,
    help="Address other nodes reach this node by (multi-NIC).",
)
@click.option(
    "--rdzv-timeout",
    type=click.FloatRange(min=1, max=3600),
    default=60,
    show_default=True,
    metavar="SECONDS",
    help="Multi-node pre-flight: how long nodes wait for each other before all give up.",
)
@click.option(
    "--max-restarts",
    "--max_restarts",  # torchrun takes both spellings of each of its flags
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Worker-group restarts torchrun allows before the run fails.",
)
@click.option(
    "--hang-timeout",
    type=click.FloatRange(min=1),
    default=None,
    metavar="SECONDS",
    help="Stop the run when no rank's log has grown for this long (default: only warn).",
)
@click.option(
    "--startup-grace",
    type=click.FloatRange(min=1),
    default=None,
    metavar="SECONDS",
    help="Before any rank prints: how long start-up may stay silent under --hang-timeout "
    "(default: 600, or --hang-timeout if longer).",
)
@click.option("--all-ranks", is_flag=True, help="Show every rank on the console, not rank 0.")
@click.option("--run-dir", default="runs", show_default=True, help="Root of run folders.")
@click.option(
    "--skip-checks", is_flag=True, help="Skip the doctor's checks and the multi-node pre-flight."
)
@click.option("--dry-run", is_flag=True, help="Print the command and environment; run nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@click.option("--slurm", is_flag=True, help="Write a Slurm batch script instead of running.")
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="Slurm: nodes.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=None, help="Slurm: GPUs.")
@click.option("--time", "time_limit", default=None, help="Slurm: time limit HH:MM:SS.")
@click.option("--partition", default=None, help="Slurm: partition.")
@click.option("--account", default=None, help="Slurm: account.")
@click.option("--job-name", default=None, help="Slurm: job name (default: script name).")
@click.option("--cpus-per-task", type=click.IntRange(min=1), default=None, help="Slurm: CPUs.")
@click.option("--submit", is_flag=True, help="Slurm: submit with sbatch and print the job id.")
@click.option(
    "--requeue",
    is_flag=True,
    help="Slurm: on the time-limit signal or a preemption, checkpoint and requeue the job.",
)
@click.option(
    "--max-requeues",
    type=click.IntRange(min=0, max=1000),
    default=3,
    show_default=True,
    help="Slurm --requeue: requeue at most this many times.",
)
@renders
def cmd(**opts: Any) -> Result:
    """Run SCRIPT through torchrun in an environment (arguments for SCRIPT go after --).

    \b
    envtool launch train.py --gpus 4 -n torch -- --epochs 3
    envtool launch train.py --cpu --nproc 2
    envtool launch train.py --nnodes 2 --node-rank 0 --rdzv-endpoint 10.0.0.1:29400
    envtool launch train.py --slurm --nodes 2 --gpus-per-node 8 --time 02:00:00 --submit
    """
    target = resolve_and_say(
        "launch", "launching in", opts["name"], opts["prefix"], opts["python_path"]
    )
    if opts["standalone"] and (opts["nnodes"] or 1) > 1:
        raise UsageError(
            f"--standalone runs one node; --nnodes {opts['nnodes']} asks for more",
            "drop --standalone (or --nnodes)",
        )
    script = Path(opts["script"])
    if not script.is_file():
        raise UsageError(
            f"{opts['script']}: no such training script", "pass the path of a .py file"
        )
    from envtool.adapters.launch.launcher import check_runs_root

    check_runs_root(Path(opts["run_dir"]))  # as given: launch_slurm resolves it
    run_id = new_run_id()
    if opts["requeue"] and not opts["slurm"]:
        raise UsageError(
            "--requeue requeues a Slurm job", "add --slurm (a local run resumes when relaunched)"
        )
    if opts["startup_grace"] is not None and opts["hang_timeout"] is None and not opts["slurm"]:
        # alone it bounded nothing: the run only warned, as without it
        raise UsageError(
            f"--startup-grace {opts['startup_grace']:g} bounds start-up under --hang-timeout",
            "add --hang-timeout SECONDS (the bound once ranks print)",
        )
    if opts["slurm"]:
        if opts["hang_timeout"] is not None or opts["startup_grace"] is not None:
            # the batch job runs torchrun without envtool
            flag = "--hang-timeout" if opts["hang_timeout"] is not None else "--startup-grace"
            raise UsageError(
                f"{flag} watches a local run; a --slurm job is not watched by envtool",
                f"drop {flag} (bound the job with --time)",
            )
        if opts["requeue"]:
            check_resumable(list(opts["script_args"]))
        return launch_slurm(opts, target, script, run_id)
    return launch_local(opts, target, script, run_id)


def check_resumable(script_args: list[str]) -> None:
    """A requeued job runs the same command again: the templates resume from their checkpoint
    by default (`--resume auto`); `--resume never` would start over on every requeue."""
    for i, arg in enumerate(script_args):
        value = arg.split("=", 1)[1] if arg.startswith("--resume=") else None
        if arg == "--resume" and i + 1 < len(script_args):
            value = script_args[i + 1]
        if value == "never":
            raise UsageError(
                "--requeue with the script's --resume never: every requeue would start over",
                "drop --resume never (the templates resume from their checkpoint by default)",
            )


def new_run_id() -> str:
    from envtool.core.launch_plan import render_run_id

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return render_run_id(stamp, os.urandom(3).hex())


def launch_local(opts: dict[str, Any], target: Any, script: Path, run_id: str) -> Result:
    """Run torchrun here. The Result carries the ranks' exit code; its text is empty (the ranks'
    output and envtool's notes already streamed), --json prints the manifest."""
    from envtool.adapters.host.host_probe import probe_host, summarize_host
    from envtool.adapters.launch import launcher
    from envtool.core.launch_plan import LaunchRequest, plan_launch, render_dry_run

    torch_version = preflight_torch(target)
    # --cpu needs no GPU count up front: the host is probed for the manifest after the start
    host_facts = None if opts["cpu"] else probe_host()
    if host_facts is not None and host_facts.driver_hung and not opts["skip_checks"]:
        # its GPUs are unseen, not absent: planning on would fall back to CPU without a word
        preflight_doctor(target, host_facts)
    host = None if host_facts is None else summarize_host(host_facts)
    nnodes = opts["nnodes"] or 1
    free_port = None
    if nnodes == 1 and not opts["rdzv_endpoint"]:
        from envtool.adapters.launch.ports import probe_free_port

        free_port = probe_free_port()
    endpoint_is_local = False
    if nnodes > 1 and opts["rdzv_endpoint"] and opts["node_rank"] is None:
        from envtool.adapters.launch.ports import probe_is_local_address
        from envtool.core.launch_plan import parse_endpoint

        endpoint_is_local = probe_is_local_address(parse_endpoint(opts["rdzv_endpoint"])[0])
    environ = launcher.read_activated_environ(target.prefix, os.environ)
    req = LaunchRequest(
        script=str(script),
        python=str(target.python),
        run_id=run_id,
        runs_root=opts["run_dir"],
        script_args=list(opts["script_args"]),
        gpus=opts["gpus"],
        nproc=opts["nproc"],
        cpu=opts["cpu"],
        visible_gpus=host["visible_gpus"] if host else 0,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        cpu_count=os.cpu_count() or 1,
        nnodes=nnodes,
        node_rank=opts["node_rank"],
        rdzv_endpoint=opts["rdzv_endpoint"],
        rdzv_id=opts["rdzv_id"],
        free_port=free_port,
        endpoint_is_local=endpoint_is_local,
        local_addr=opts["local_addr"],
        max_restarts=opts["max_restarts"],
        all_ranks=opts["all_ranks"],
        environ=dict(os.environ),
    )
    plan = plan_launch(req)
    preflight = nnodes > 1 and not opts["skip_checks"]
    if opts["dry_run"]:
        data: dict[str, Any] = {
            "dry_run": True,
            "plan": plan.to_dict(),
            "target": target_data(target, "launching in"),
        }
        text = render_dry_run(plan)
        if preflight:
            data["preflight_token"], lines = render_token_lines(os.environ)
            text = lines + text
        return Result("launch", data=data, text=text)
    from envtool.adapters.launch.preflight import read_token

    # the multi-node pre-flight's shared secret, or exit 2 saying how to make one
    token = read_token(os.environ) if preflight else None
    environ.pop(PREFLIGHT_TOKEN_VAR, None)  # the pre-flight's secret: not the ranks' business
    check_rendezvous_port(opts, nnodes, endpoint_is_local)
    if plan.backend == "nccl" and not opts["skip_checks"]:
        preflight_doctor(target, host_facts or probe_host())
    if token is not None:
        preflight_nodes(opts, target, torch_version, endpoint_is_local, token)
    say_target()
    for line in plan.notes:
        note(f"envtool: {line}")
    manifest: dict[str, Any] = {
        "run_id": run_id,
        "script": str(script),
        "host": socket.gethostname(),
        "pid": os.getpid(),  # `envtool runs`/`logs --follow`: is the run still being written
        # as a record: a secret passed on the command line is not written down
        "command": redact_secret_args(list(plan.argv)),
        "envtool_argv": redact_secret_args(["envtool", *sys.argv[1:]]),
        "env_prefix": str(target.prefix) if target.prefix else None,
        "python": str(target.python),
        "torch_version": torch_version,
        "lock_hash": None,
        "git_commit": None,
        "driver": None,
        "gpus": [],
        "backend": plan.backend,
        "nnodes": plan.nnodes,
        "node_rank": plan.node_rank,
        "nproc_per_node": plan.nproc_per_node,
        "rendezvous": plan.rendezvous,
        "env_added": plan.env_add,
        "start_time": None,
        "end_time": None,
        "exit_code": None,
        "failed_rank": None,
        "failure": None,
        "rank_logs": {},
        "restarts": [],
        "merged_log": str(Path(plan.run_dir) / "all.log"),
    }
    manifest_path = Path(plan.run_dir) / "manifest.json"
    note(
        f"envtool: run {run_id}: {plan.nnodes} node(s) x {plan.nproc_per_node} "
        f"({plan.backend}); logs in {plan.run_dir}/"
    )

    def record_facts() -> None:
        """While the ranks start: the facts only the manifest needs, then write it."""
        facts = host or summarize_host(probe_host())
        manifest.update(
            lock_hash=launcher.read_lock_hash(target.prefix),
            git_commit=launcher.probe_git_commit(script),
            driver=facts["driver"],
            gpus=facts["gpus"],
        )
        try:
            launcher.write_manifest(manifest_path, manifest)  # a crash still leaves what started
        except launcher.RunDirError as exc:  # apply_launch stops the run: it cannot be recorded
            raise DiagnosedFailure(f"run {run_id} stopped: {exc.message}", exc.hint) from None

    outcome = launcher.apply_launch(
        plan,
        environ,
        stdout_to_stderr=opts["as_json"],
        on_started=record_facts,
        hang_timeout=opts["hang_timeout"],
        startup_grace=opts["startup_grace"],
    )
    manifest.update(
        start_time=outcome.started,
        end_time=outcome.ended,
        exit_code=outcome.exit_code,
        interrupted_by=outcome.interrupted_by,
        rank_logs=outcome.rank_logs,
        restarts=[f.__dict__ for f in outcome.restarts],  # each failure torchrun restarted after
    )
    if outcome.hang is not None:  # the hung rank, not the one torchrun saw die of our SIGTERM
        outcome.failure = None
        manifest["failed_rank"] = outcome.hang.rank
        manifest["hang"] = outcome.hang.__dict__
    if outcome.failure is not None:
        manifest["failed_rank"] = outcome.failure.rank
        manifest["failure"] = outcome.failure.__dict__
    try:
        launcher.write_manifest(manifest_path, manifest)
        disk_error = outcome.log_error
    except launcher.RunDirError as exc:
        disk_error = exc
    if disk_error is not None and (outcome.exit_code != 0 or disk_error is not outcome.log_error):
        # the run folder's disk is the story (the ranks died writing to it): one line, exit 1
        ended = "failed" if outcome.exit_code != 0 else "finished"
        raise DiagnosedFailure(f"run {run_id} {ended}, and {disk_error.message}", disk_error.hint)
    if disk_error is not None:
        note(f"envtool: warning: {disk_error.message}: launcher.log is incomplete")
    from envtool.core.launch_plan import render_failure, render_restarts

    if outcome.hang is not None:
        hang = outcome.hang
        logs = hang.log or plan.run_dir + "/"
        if hang.startup:
            verdict = (
                f"no rank printed anything for {hang.all_silent:.0f} s after "
                f"{f'restart {hang.attempt}' if hang.attempt else 'the start'} "
                f"({hang.label}) — stopped by --startup-grace (with --hang-timeout "
                f"{opts['hang_timeout']:g}); raise --startup-grace if start-up takes longer; "
                f"logs: {logs}"
            )
        else:
            verdict = (
                f"{hang.label} made no progress for {hang.rank_silent:.0f} s "
                f"({hang.why}; no rank's log grew for {hang.all_silent:.0f} s) — stopped by "
                f"--hang-timeout {opts['hang_timeout']:g}; logs: {logs}"
            )
    elif outcome.interrupted_by:
        verdict = f"stopped by {outcome.interrupted_by}; every rank ended — logs: {plan.run_dir}/"
    elif outcome.failure is not None:
        verdict = render_failure(outcome.failure)
    elif outcome.exit_code != 0:
        verdict = f"job failed (exit {outcome.exit_code}) — logs: {plan.run_dir}/"
    else:
        after = f" {render_restarts(len(outcome.restarts))}" if outcome.restarts else ""
        verdict = f"run {run_id} finished{after} — manifest: {manifest_path}"
    if outcome.restarts and outcome.exit_code != 0:  # "… — logs: … (after 2 restarts)"
        verdict += f" ({render_restarts(len(outcome.restarts))})"
    note(f"envtool: {verdict}")
    data = {"manifest": manifest, "target": target_data(target, "launching in")}
    if outcome.exit_code != 0:  # the same line as the terminal's, where --json readers look
        data["error"] = {"message": verdict, "hint": f"logs: {plan.run_dir}/"}
    return Result("launch", data=data, exit_code=outcome.exit_code)


def render_token_lines(environ: Any) -> tuple[str | None, list[str]]:
    """`launch --dry-run` of a multi-node run: the token every node needs, a fresh one to
    export when none is set (None, plus a comment, when one is: it is not printed)."""
    from envtool.adapters.launch.preflight import render_new_token

    if environ.get(PREFLIGHT_TOKEN_VAR):
        return None, [f"# the pre-flight uses {PREFLIGHT_TOKEN_VAR} from this environment"]
    token = render_new_token()
    return token, [
        "# the pre-flight's shared secret: export it on every node (keep it out of files others read)",
        f"export {PREFLIGHT_TOKEN_VAR}={token}",
    ]


def preflight_nodes(
    opts: dict[str, Any],
    target: Any,
    torch_version: str | None,
    endpoint_is_local: bool,
    token: bytes,
) -> None:
    """Before a multi-node torchrun: the head (node 0, or the node the c10d endpoint is local
    to) listens on the rendezvous port; the others reach it within --rdzv-timeout, proving they
    hold the run's token; every node's torch, CUDA, NCCL and lock hash match the head's. Any
    failure ends every node in one line; a connection without the token is dropped and noted."""
    from envtool.adapters.launch import preflight
    from envtool.core.launch_plan import parse_endpoint

    host, port = parse_endpoint(opts["rdzv_endpoint"])
    fingerprint = preflight.probe_fingerprint(target.prefix, torch_version)
    node_rank = opts["node_rank"]
    is_head = node_rank == 0 if node_rank is not None else endpoint_is_local
    what = (
        f"waiting for {opts['nnodes'] - 1} other node(s) on port {port}"
        if is_head
        else f"checking in with the head {host}:{port}"
    )
    note(f"envtool: pre-flight: {what} (at most {opts['rdzv_timeout']:g} s)")
    if is_head:
        preflight.run_head(host, port, opts["nnodes"], fingerprint, opts["rdzv_timeout"], token)
    else:
        preflight.run_node(host, port, node_rank, fingerprint, opts["rdzv_timeout"], token)


def check_rendezvous_port(opts: dict[str, Any], nnodes: int, endpoint_is_local: bool) -> None:
    """An explicit --rdzv-endpoint this node will listen on (one node, or the head node) must
    have its port free: torchrun would otherwise end in a store traceback."""
    from envtool.adapters.launch.ports import probe_is_local_address, probe_port_in_use
    from envtool.core.launch_plan import parse_endpoint

    if not opts["rdzv_endpoint"]:
        return
    host, port = parse_endpoint(opts["rdzv_endpoint"])
    if nnodes > 1 and (opts["node_rank"] or 0) != 0:
        return  # a worker node connects to the head's store; it listens on nothing
    if not (endpoint_is_local or probe_is_local_address(host)):
        return  # another machine's port: not ours to probe
    if probe_port_in_use(host, port):
        fix = (
            "pick another --rdzv-endpoint port or omit it"
            if nnodes == 1
            else "pick another --rdzv-endpoint port (the same on every node)"
        )
        raise UsageError(f"port {port} on {host} is in use", fix)


def preflight_torch(target: Any) -> str | None:
    """torch must be in the environment; read statically (no torch import, stays fast)."""
    from envtool.adapters.launch.launcher import read_torch_version
    from envtool.adapters.proc import run_capture

    version = read_torch_version(target.prefix)
    if version:
        return version
    code = "import importlib.metadata as m; print(m.version('torch'))"
    res = run_capture([str(target.python), "-c", code], timeout=30.0)
    if res.ok and res.stdout.strip():
        return res.stdout.strip()
    if target.choice is not None and target.choice.source == "own":
        raise UsageError(
            f"torch is not installed in envtool's own python ({target.python}) and no "
            "environment is active",
            "activate the environment that has torch (`conda activate ENV`, `source "
            ".venv/bin/activate`), or pass -n NAME / --prefix PATH / --python PATH",
        )
    raise UsageError(
        f"torch is not installed in {target.label} ({target.python})",
        "install torch there (`envtool create NAME --cuda auto` makes an env with it), "
        "or pick another env with -n NAME / --prefix PATH / --python PATH",
    )


def preflight_doctor(target: Any, host: HostFacts) -> None:
    """The doctor's fast checks (no python run) over the already probed host must pass before
    GPUs are claimed."""
    from envtool.adapters.host.doctor_probe import probe_env_fast
    from envtool.core.checks import FAIL, run_checks

    failed = [c for c in run_checks(host, probe_env_fast(target)) if c.status == FAIL]
    if failed:
        lines = [f"{c.id}: {c.summary}" for c in failed]
        fixes = [c.fix for c in failed if c.fix]
        raise DiagnosedFailure(
            "pre-flight doctor checks failed: " + "; ".join(lines),
            ("; ".join(fixes) or "run `envtool doctor` for details") + " (or pass --skip-checks)",
        )


def launch_slurm(opts: dict[str, Any], target: Any, script: Path, run_id: str) -> Result:
    from envtool.core.launch_plan import parse_gpus
    from envtool.core.shell_quote import quote_posix
    from envtool.core.slurm import SlurmRequest, job_name_from, parse_job_id, render_sbatch

    if not opts["nodes"]:
        raise UsageError("--slurm needs --nodes N", "e.g. --slurm --nodes 2 --gpus-per-node 8")
    gpus = parse_gpus(opts["gpus"])
    if gpus == "all":  # this machine (a login node) cannot see the compute nodes' GPUs
        raise UsageError(
            "--slurm --gpus all: the GPU count of the compute nodes is not known here",
            "pass the count, e.g. --slurm --nodes 2 --gpus-per-node 8",
        )
    if isinstance(gpus, int):  # --slurm --gpus 8 reads as 8 per node
        if opts["gpus_per_node"] and opts["gpus_per_node"] != gpus:
            raise UsageError(
                f"--gpus {gpus} and --gpus-per-node {opts['gpus_per_node']} disagree",
                "with --slurm, pass only --gpus-per-node G (GPUs on each node)",
            )
        opts["gpus_per_node"] = gpus
    if not opts["cpu"] and not opts["gpus_per_node"]:
        raise UsageError(
            "--slurm needs --gpus-per-node G (or --cpu)", "e.g. --nodes 2 --gpus-per-node 8"
        )
    run_dir = (Path(opts["run_dir"]) / run_id).resolve()  # compute nodes need absolute paths
    req = SlurmRequest(
        script=str(script.resolve()),
        script_args=list(opts["script_args"]),
        python=str(Path(target.python).absolute()),
        prefix=str(target.prefix) if target.prefix else None,
        is_conda=bool(target.prefix and (Path(target.prefix) / "conda-meta").is_dir()),
        nodes=opts["nodes"],
        gpus_per_node=opts["gpus_per_node"],
        cpu=opts["cpu"],
        nproc=opts["nproc"],
        time=_slurm_time(opts["time_limit"]),
        partition=opts["partition"],
        account=opts["account"],
        job_name=opts["job_name"] or job_name_from(script.stem),
        cpus_per_task=opts["cpus_per_task"],
        run_dir=str(run_dir),
        max_restarts=opts["max_restarts"],
        workdir=str(Path.cwd()),
        requeue=opts["requeue"],
        max_requeues=opts["max_requeues"],
        rdzv_timeout=opts["rdzv_timeout"],
    )
    if opts["nodes"] > 1 and not opts["skip_checks"]:
        from envtool.adapters.launch.preflight import script_source

        req.preflight_script = script_source()  # run by the env's python on every node
    if req.is_conda:
        from envtool.adapters.launch.activation import render_activation_script

        # the exact script `conda activate` runs, activate.d hooks included
        req.activation = render_activation_script(Path(req.prefix or ""), "bash")
    try:
        text = render_sbatch(req)
    except ValueError as exc:  # a value that cannot go in an #SBATCH line
        raise UsageError(str(exc), "pick a plain value (the job script reads it)") from None
    path = run_dir / "job.sbatch"
    data: dict[str, Any] = {"run_id": run_id, "sbatch_path": str(path), "job_id": None}
    if opts["dry_run"]:
        return Result("launch", data={**data, "dry_run": True, "script": text}, text=[text])
    from envtool.adapters.files import write_atomic
    from envtool.adapters.launch.launcher import make_run_dir, read_lock_hash, write_manifest
    from envtool.core.slurm import plan_nproc_per_node

    make_run_dir(run_dir)
    write_atomic(path, text, mode=0o600)  # it carries the script's arguments, secrets too
    # `envtool runs` lists the job too; requeues keep this folder (the script names it)
    manifest: dict[str, Any] = {
        "run_id": run_id,
        "script": str(script),
        "envtool_argv": redact_secret_args(["envtool", *sys.argv[1:]]),
        "env_prefix": req.prefix,
        "python": req.python,
        "lock_hash": read_lock_hash(target.prefix),
        "nnodes": req.nodes,
        "nproc_per_node": plan_nproc_per_node(req),
        "slurm": {
            "sbatch": str(path),
            "job_id": None,
            "requeue": req.requeue,
            "max_requeues": req.max_requeues if req.requeue else None,
            "history": str(run_dir / "requeues.log") if req.requeue else None,
        },
    }
    write_manifest(run_dir / "manifest.json", manifest)
    lines = [f"wrote {path}"]
    if opts["submit"]:
        from envtool.adapters.proc import run_capture

        res = run_capture(["sbatch", str(path)], timeout=60.0)
        if res.missing:
            raise UsageError("sbatch not found", f"submit {path} from a Slurm login node")
        job_id = parse_job_id(res.stdout)
        if not res.ok or job_id is None:
            raise DiagnosedFailure(
                f"sbatch refused {path}: {(res.stderr or res.stdout).strip()}",
                "check --partition/--account/--time against `sinfo`",
            )
        data["job_id"] = job_id
        manifest["slurm"]["job_id"] = job_id
        manifest["submit_time"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        write_manifest(run_dir / "manifest.json", manifest)
        lines.append(f"submitted job {job_id} — output: {run_dir}/slurm-{job_id}.out")
    else:
        lines.append(f"submit with: sbatch {quote_posix(str(path))}")
    return Result("launch", data=data, text=lines)


def _slurm_time(value: str | None) -> str | None:
    from envtool.core.slurm import parse_slurm_time

    if value is None:
        return None
    try:
        return parse_slurm_time(value)
    except ValueError as exc:
        raise UsageError(str(exc), "e.g. --time 02:00:00 or --time 1-12:00:00") from None
