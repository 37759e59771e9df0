"""`envtool info NAME`: one environment's plan, lock and state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envtool.output import Result, emit


def finish_command(row: dict[str, Any]) -> str:
    """The command that finishes the unfinished install of a `describe_env` row (info, list):
    core.hints' answer, from the lock the interrupted install recorded, by NAME when the env is
    the envs dir's NAME, else by its prefix."""
    from envtool.adapters.install_state import read_incomplete_marker
    from envtool.adapters.locate import env_prefix
    from envtool.core.hints import finish_install_command
    from envtool.errors import UsageError

    prefix = str(row["prefix"])
    lock = (read_incomplete_marker(prefix) or {}).get("lock_path") or row.get("lock_path")
    name = row.get("name")
    try:
        by_name = bool(name) and env_prefix(name) == Path(prefix)
    except UsageError:  # a folder name that is not an env name: only its prefix names it
        by_name = False
    return finish_install_command(name if by_name else None, prefix, lock)


@click.command("info")
@click.argument("name", required=False)
@click.option("--prefix", help="The environment's directory instead of NAME.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
def cmd(name: str | None, prefix: str | None, as_json: bool) -> None:
    """Show where NAME lives, what it was installed from, and whether the install finished."""
    from envtool.adapters.install_state import read_state_record
    from envtool.adapters.installed import describe_env
    from envtool.adapters.locate import existing_env

    target = existing_env(name, prefix)
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
    emit(Result("info", row, text), as_json)
