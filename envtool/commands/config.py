"""`envtool config`: the settings in force (default channels, envs and cache folders, offline,
the network idle timeout) and where each comes from: a flag, an environment variable, the
project's envtool.toml or the user's config.toml (docs/config.md)."""

from __future__ import annotations

import os

import click

from envtool.commands import renders
from envtool.output import Result


@click.command("config")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@click.pass_context
@renders
def cmd(ctx: click.Context, as_json: bool) -> Result:
    """Show the settings in force and where each comes from (flag > environment variable >
    ./envtool.toml > the user's config.toml)."""
    from envtool.adapters.config import project_config_path, user_config_path
    from envtool.core.config import SETTINGS

    origin: dict[str, str] = (ctx.obj or {}).get("config") or {}
    rows = []
    for s in SETTINGS:
        value = os.environ.get(s.env)
        rows.append(
            {
                "key": s.key,
                "env": s.env,
                "value": value,
                "source": origin.get(s.env, "default") if value is not None else "default",
            }
        )
    text = [
        f"{r['key']} = {r['value'] if r['value'] is not None else '(default)'}  [{r['source']}]"
        for r in rows
    ]
    text.append(f"files: {project_config_path()} (project), {user_config_path()} (user)")
    data = {
        "settings": rows,
        "files": {"project": str(project_config_path()), "user": str(user_config_path())},
    }
    return Result("config", data, text)
