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
    defaults = _defaults()
    for r in rows:  # what a default is here, not the word "default"
        if r["value"] is None:
            r["effective"] = defaults.get(r["key"])
    text = [
        f"{r['key']} = {r['value'] if r['value'] is not None else r['effective']}  [{r['source']}]"
        for r in rows
    ]
    text.append(f"files: {project_config_path()} (project), {user_config_path()} (user)")
    data = {
        "settings": rows,
        "files": {"project": str(project_config_path()), "user": str(user_config_path())},
    }
    return Result("config", data, text)


def _defaults() -> dict[str, str]:
    """Each setting's value when nothing sets it, on this machine."""
    from envtool.adapters.locate import default_cache_dir, envs_dir
    from envtool.adapters.solve.network import IDLE_TIMEOUT_S
    from envtool.core.plan import DEFAULT_CHANNELS

    try:
        envs = str(envs_dir())
    except Exception:  # noqa: BLE001 - a broken conda install must not take config down
        envs = "(not found)"
    return {
        "default-channels": "the flavor's: "
        + "; ".join(f"{k}: {', '.join(v)}" for k, v in DEFAULT_CHANNELS.items()),
        "envs-dir": envs,
        "cache-dir": str(default_cache_dir()),
        "offline": "false",
        "network-idle-timeout": f"{IDLE_TIMEOUT_S:g}",
    }
