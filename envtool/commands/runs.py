"""`envtool runs`: the runs under --run-dir, from their manifests (id, script, nodes x procs,
status, exit code, duration, lock hash), oldest first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envtool.commands import renders
from envtool.output import Result


@click.command("runs", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--run-dir", default="runs", show_default=True, help="Root of run folders.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(**opts: Any) -> Result:
    """List runs from their manifests: id, script, nodes x procs, status, exit, duration, lock.

    \b
    envtool runs
    envtool runs --run-dir /scratch/runs --json
    """
    from envtool.adapters.launch.runs import (
        list_run_dirs,
        read_manifest,
        read_requeue_history,
        writer_alive,
    )
    from envtool.core.runs import render_rows, summarize_manifest
    from envtool.errors import UsageError

    rows = []
    for run_dir in list_run_dirs(Path(opts["run_dir"])):
        broken = False
        try:
            manifest = read_manifest(run_dir)
        except UsageError:  # one broken manifest must not hide the other runs
            manifest, broken = None, True
        row = summarize_manifest(
            run_dir.name, manifest, writer_alive(manifest), read_requeue_history(run_dir)
        )
        if broken:
            row.status = "unreadable manifest"
        rows.append(row)
    return Result("runs", data={"runs": [r.to_dict() for r in rows]}, text=render_rows(rows))
