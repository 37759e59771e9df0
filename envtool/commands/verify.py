"""`envtool verify NAME`: installed packages vs the lock (missing, extra, changed). Exit 1 on drift."""

from __future__ import annotations

from pathlib import Path

import click

from envtool.commands import env_name, refuse_own_env, renders, resolve_and_say, target_data
from envtool.output import Result


@click.command("verify")
@env_name
@click.option("-p", "--prefix", help="The environment's directory instead of NAME.")
@click.option(
    "--lock", "lock_file", help="Compare with this lock (default: the one it was installed from)."
)
@click.option(
    "--full",
    is_flag=True,
    help="Also compare every file's sha256 with its package record (slower: reads every file).",
)
@click.option(
    "--variant", help="Compare with this variant's lock of NAME's variant locks (cuda12.6, cpu…)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(
    name: str | None,
    prefix: str | None,
    lock_file: str | None,
    full: bool,
    as_json: bool,
    variant: str | None = None,
) -> Result:
    """Compare an installed environment with its lock; exit 1 when they differ."""
    from envtool.adapters.install.install_state import (
        read_incomplete_marker,
        read_install_state,
        read_state_record,
    )
    from envtool.adapters.install.installed import compute_drift
    from envtool.adapters.locate import looks_like_env, project_lock_path
    from envtool.core.drift import render_drift
    from envtool.errors import UsageError

    chosen = resolve_and_say("verify", "verifying", name, prefix)
    refuse_own_env(chosen, "verify")
    target = chosen.prefix
    if target is None or not looks_like_env(target):
        raise UsageError(
            f"{chosen.prefix or chosen.python}: a {chosen.kind}, not an environment envtool "
            "installed (no conda-meta/): there is no lock to compare it with",
            "pass the NAME of an envtool environment (see `envtool list`) or --prefix PATH",
        )
    lock = Path(lock_file) if lock_file else None
    if variant is not None:  # environments/NAME/conda-lock.<variant>.yml, known to the index
        from envtool.adapters.lockfile.variant_lock import pick_variant_lock

        lock = pick_variant_lock(variant, lock_file, name)
    if lock is None:
        # an interrupted first install has no state record yet; its marker names the lock
        recorded = (read_state_record(target) or {}).get("lock_path") or (
            read_incomplete_marker(target) or {}
        ).get("lock_path")
        try:
            project = project_lock_path(name) if name else None
        except UsageError:  # a conda env name no project folder can have (e.g. _scratch)
            project = None
        from envtool.adapters.lockfile.pixi_lock import lock_file_exists

        if recorded and lock_file_exists(recorded):  # a pixi.lock's: <file>#environment=NAME
            lock = Path(recorded)
        elif project and project.is_file():
            lock = project
        else:
            raise UsageError(
                f"no lock known for {target}", "pass --lock FILE: the conda-lock.yml it came from"
            )
    drift = compute_drift(target, lock, check_files=True, full=full)
    state = read_install_state(target)
    drift["install_state"] = state
    text = render_drift({**drift, "damaged": []}) if not drift["clean"] else render_drift(drift)
    for row in drift["damaged"]:
        what = [
            f"{n} file{'s' if n > 1 else ''} {how}"
            for n, how in ((row["missing_files"], "gone"), (row["changed_files"], "changed"))
            if n
        ]
        text.append(f"damaged  {row['name']}: {', '.join(what)} (first: {row['first']})")
    for record in drift["damaged_records"]:
        text.append(f"damaged  {record}: not a readable package record")
    if state == "incomplete":
        again = _install_again(name, prefix, target, lock)
        text.append(f"the last install did not finish: run `{again}`")
    elif drift.get("damaged") or drift.get("damaged_records"):
        again = _install_again(name, prefix, target, lock)
        text.append(f"`{again}` relinks the damaged packages from the cache")
    bad = not drift["clean"] or state == "incomplete"
    data = {"prefix": str(target), "target": target_data(chosen, "verifying"), **drift}
    return Result("verify", data, text, exit_code=1 if bad else 0)


def _install_again(name: str | None, prefix: str | None, target: Path, lock: Path) -> str:
    """The install that relinks or finishes this env from the lock verify compared with, with
    --force when the one host check (core.host_check, as install applies it) refuses that lock
    on this host: without it the printed command would only be refused."""
    from envtool.adapters.host.host_probe import probe_host
    from envtool.adapters.locate import current_platform
    from envtool.adapters.lockfile.lock_io import read_lock
    from envtool.core.hints import finish_install_command
    from envtool.core.host_check import host_refusal

    meta = read_lock(lock).custom_metadata
    force = host_refusal(meta, current_platform(), probe_host()) is not None
    by_prefix = prefix is not None or not name
    return finish_install_command(
        None if by_prefix else name, str(target), str(lock.absolute()), force
    )
