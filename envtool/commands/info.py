"""`envtool info [NAME]`: one environment's plan, lock and state (the active one with no NAME;
before install, from the project's lock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envtool.commands import env_name, renders, resolve_and_say, target_data
from envtool.output import Result


@click.command("info")
@env_name
@click.option("-p", "--prefix", help="The environment's directory instead of NAME.")
@click.option(
    "--packages",
    is_flag=True,
    help="List the installed packages instead (conda list -n NAME): name, version, build, "
    "channel; pip's as pypi.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(name: str | None, prefix: str | None, as_json: bool, packages: bool = False) -> Result:
    """Show where NAME lives, what it was installed from, and whether the install finished.
    NAME not installed yet but locked in this project (environments/NAME/conda-lock.yml): what
    its lock would install. No NAME or --prefix: the active conda env, else the active venv."""
    from envtool.adapters.install.install_state import read_state_record
    from envtool.adapters.install.installed import describe_env, finish_command
    from envtool.adapters.locate import env_prefix, project_lock_path

    if packages:
        return _packages(name, prefix)
    if name and not prefix and not env_prefix(name).is_dir():
        lock = project_lock_path(name)
        if lock.is_file():  # locked, not installed: what the lock holds
            return _info_from_lock(name, lock)
    chosen = resolve_and_say("info", "showing", name, prefix)
    target = chosen.prefix or chosen.python.parent
    row = describe_env(target)
    from envtool.core.variants import variant_of_lock_file

    if variant := variant_of_lock_file(row.get("lock_path")):  # installed from variant locks
        row["variant"] = variant
    plan = (read_state_record(target) or {}).get("plan") or {}
    row["plan"] = plan
    text = [f"{k:14} {v}" for k, v in row.items() if k != "plan" and v is not None]
    for key, value in sorted(plan.items()):
        short = key.removeprefix("envtool_")
        if value and key != "envtool_request" and short not in row:
            text.append(f"{short:14} {value}")
    if row["state"] == "incomplete":
        row["finish_command"] = finish_command(row)
        text.append(f"the last install did not finish: run `{row['finish_command']}` to finish it")
    row["target"] = target_data(chosen, "showing")
    return Result("info", row, text)


def _packages(name: str | None, prefix: str | None) -> Result:
    """What `conda list -n NAME` prints: every package record of the prefix (channel by name),
    then the pip distributions no conda package owns, as channel `pypi`."""
    from envtool.adapters.install.installed import read_conda_meta, read_pip_dists
    from envtool.commands import refuse_own_env
    from envtool.errors import UsageError

    chosen = resolve_and_say("info", "listing the packages of", name, prefix)
    refuse_own_env(chosen, "info --packages")
    target = chosen.prefix or chosen.python.parent
    if not (target / "conda-meta").is_dir():
        raise UsageError(
            f"{target}: not a conda environment (no conda-meta/)", "for a venv: pip list"
        )
    records = read_conda_meta(target)
    rows = [
        {
            "name": str(r.get("name", "")),
            "version": str(r.get("version", "")),
            "build": str(r.get("build", "")),
            "channel": str(r.get("channel", "")).rstrip("/").rsplit("/", 1)[-1],
        }
        for r in records
    ]
    rows += [
        {"name": d["name"], "version": d["version"], "build": "", "channel": "pypi"}
        for d in read_pip_dists(target, records)
    ]
    rows.sort(key=lambda r: r["name"].lower())
    from envtool.core.shell_quote import printable

    width = max((len(r["name"]) for r in rows), default=4) + 2
    text = [f"# packages in environment at {target}:", "#"]
    text += [
        printable(f"{r['name']:{width}}{r['version']:16} {r['build']:24} {r['channel']}".rstrip())
        for r in rows
    ]
    return Result("info", {"prefix": str(target), "packages": rows}, text)


def _info_from_lock(name: str, lock_path: Path) -> Result:
    """A locked, not yet installed env: its plan (the lock's custom metadata), its platforms,
    packages and torch, and the install that makes it."""
    from envtool.adapters.locate import current_platform, env_prefix
    from envtool.adapters.lockfile.lock_io import read_lock
    from envtool.core.shell_quote import quote_posix
    from envtool.output import note

    note(f"envtool info: {name} is not installed; showing its lock {lock_path}")
    lock = read_lock(lock_path)
    here = current_platform()
    packages = (lock.conda(here) or lock.conda(lock.platforms[0])) if lock.platforms else {}
    torch = packages.get("pytorch") or packages.get("torch")
    meta = lock.custom_metadata
    row: dict[str, Any] = {
        "name": name,
        "prefix": str(env_prefix(name)),
        "state": "not installed",
        "flavor": meta.get("envtool_flavor"),
        "cuda": meta.get("envtool_cuda"),
        "torch": f"{torch.version} {torch.build}".strip() if torch else None,
        "lock_path": str(lock_path),
        "lock_sha256": lock.sha256,
        "platforms": ", ".join(lock.platforms),
        "conda_packages": len(lock.for_platform(here)),
        "install_command": f"envtool install {quote_posix(name)}",
        "plan": dict(meta),
    }
    text = [f"{k:14} {v}" for k, v in row.items() if k not in ("plan",) and v is not None]
    for key, value in sorted(meta.items()):
        short = key.removeprefix("envtool_")
        if value and key != "envtool_request" and short not in row:
            text.append(f"{short:14} {value}")
    if here not in lock.platforms:
        text.append(f"the lock has no {here} solution: `envtool lock {quote_posix(name)}` adds it")
    return Result("info", row, text)
