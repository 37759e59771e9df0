"""`envtool info NAME`: one environment's plan, lock and state."""

from __future__ import annotations

import click

from envtool.output import Result, emit


@click.command("info")
@click.argument("name", required=False)
@click.option("--prefix", help="The environment's directory instead of NAME.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
def cmd(name: str | None, prefix: str | None, as_json: bool) -> None:
    """Show where NAME lives, what it was installed from, and whether the install finished."""
    from envtool.adapters.install_state import read_state_record
    from envtool.adapters.installed import describe_env
    from envtool.adapters.locate import existing_env
    from envtool.core.shell_quote import quote_posix

    target = existing_env(name, prefix)
    row = describe_env(target)
    plan = (read_state_record(target) or {}).get("plan") or {}
    row["plan"] = plan
    text = [f"{k:14} {v}" for k, v in row.items() if k != "plan" and v is not None]
    for key, value in sorted(plan.items()):
        short = key.removeprefix("envtool_")
        if value and key != "envtool_request" and short not in row:
            text.append(f"{short:14} {value}")
    if row["state"] == "incomplete":
        # the same install again finishes it; an env given by path is named by its path
        again = quote_posix(row["name"])
        if prefix:
            lock, where = row.get("lock_path"), quote_posix(str(target))
            again = f"--lock {quote_posix(lock)} --prefix {where}" if lock else f"--prefix {where}"
        text.append(f"the last install did not finish: run `envtool install {again}` to finish it")
    emit(Result("info", row, text), as_json)
