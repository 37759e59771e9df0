"""`envtool logs`: a run's merged log (runs/<id>/all.log, every rank's lines prefixed
`[node N rank R]`), the latest run by default; `--follow` prints new lines until the run ends."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from envtool.commands import renders
from envtool.output import Result, emit

FOLLOW_POLL_SECONDS = 0.5


@click.command("logs", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run", required=False)
@click.option("--rank", type=click.IntRange(min=0), default=None, help="Only this global rank.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the run ends.")
@click.option("--run-dir", default="runs", show_default=True, help="Root of run folders.")
@renders
def cmd(**opts: Any) -> Result:
    """Print RUN's merged log (every rank, `[node N rank R]` prefixes); the latest run by
    default. RUN: a run id from `envtool runs`, or a run folder's path.

    \b
    envtool logs                      # the latest run
    envtool logs 20261130-031939-97668d --rank 1
    envtool logs --follow
    """
    from envtool.adapters.launch.runs import MERGED_LOG, find_run, read_log_from, read_manifest
    from envtool.core.runs import LineSplitter

    run_dir = find_run(Path(opts["run_dir"]), opts["run"])
    path = run_dir / MERGED_LOG
    rank = opts["rank"]
    offset = 0
    lines = LineSplitter()  # a line past 64 KiB is cut: linear time, bounded memory

    def drain() -> None:
        nonlocal offset
        while True:
            data, offset = read_log_from(path, offset)
            if not data:
                return
            show(lines.feed(data))

    def show(raw: list[bytes]) -> None:
        from envtool.core.runs import filter_rank

        text = [line.decode("utf-8", errors="replace") for line in raw]
        if rank is not None:
            text = filter_rank(text, rank)
        if text:
            emit(Result("logs", text=text), False)

    from envtool.errors import UsageError

    manifest = read_manifest(run_dir)
    if isinstance(manifest, dict) and isinstance(manifest.get("slurm"), dict):
        raise UsageError(
            f"{run_dir.name} is a Slurm job: its console output is {run_dir}/slurm-<job id>.out",
            f"every rank's log is under {run_dir}/torchrun/node-N/ (no merged log for Slurm jobs)",
        )
    world = _world_size(manifest)
    if rank is not None and world is not None and rank >= world:
        raise UsageError(
            f"--rank {rank}: run {run_dir.name} has ranks 0-{world - 1}",
            "pick one of those (or leave --rank out for every rank)",
        )
    if not opts["follow"] and not path.exists():
        raise UsageError(
            f"{run_dir}: no merged log ({MERGED_LOG})",
            "runs launched by an older envtool or by a Slurm job keep per-rank logs under "
            "torchrun/",
        )
    try:
        drain()
        while opts["follow"] and not _ended(read_manifest(run_dir)):
            time.sleep(FOLLOW_POLL_SECONDS)
            drain()
        drain()
    except KeyboardInterrupt:
        return Result("logs", exit_code=130)
    show(lines.flush())
    return Result("logs")  # the log itself was streamed as it came


def _world_size(manifest: Any) -> int | None:
    """nnodes x nproc_per_node as the manifest records them; None when it does not (an older
    or edited manifest: then no rank is refused)."""
    if not isinstance(manifest, dict):
        return None
    nnodes, nproc = manifest.get("nnodes"), manifest.get("nproc_per_node")
    if type(nnodes) is int and type(nproc) is int and nnodes > 0 and nproc > 0:
        return nnodes * nproc
    return None


def _ended(manifest: Any) -> bool:
    """The run is over: its manifest has an exit code, or the envtool writing it is not known
    to be running here — gone, or on another host, or a pid that cannot be one (an edited or
    copied manifest: following it would never end) — or there is none to wait for (envtool
    writes it before all.log, so a folder with a log and no readable manifest was left by a
    killed or older envtool)."""
    from envtool.adapters.launch.runs import writer_alive

    if not isinstance(manifest, dict) or manifest.get("exit_code") is not None:
        return True
    return writer_alive(manifest) is not True
