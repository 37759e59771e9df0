"""`envtool info NAME`: one environment's plan, lock and state."""

from __future__ import annotations

import click

from envtool.commands import renders
from envtool.output import Result


@click.command("info")
@click.argument("name", required=False)
@click.option("--prefix", help="The environment's directory instead of NAME.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(name: str | None, prefix: str | None, as_json: bool) -> Result:
    """Show where NAME lives, what it was installed from, and whether the install finished."""
    from envtool.adapters.install.install_state import read_state_record
    from envtool.adapters.install.installed import describe_env, finish_command
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
    return Result("info", row, text)
