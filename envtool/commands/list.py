"""`envtool list`: installed environments and their state (complete | incomplete | unknown)."""

from __future__ import annotations

from pathlib import Path

import click

from envtool.commands import renders
from envtool.core.shell_quote import printable
from envtool.output import Result


def render_env_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    head = ("NAME", "STATE", "FLAVOR", "CUDA", "TORCH", "LOCK", "PREFIX")
    table = [
        (
            r["name"],
            "removing (interrupted)" if r.get("interrupted") else r["state"],
            r["flavor"] or "-",
            r["cuda"] or "-",
            r["torch"] or "-",
            (r["lock_sha256"] or "-")[:12],
            r["prefix"],
        )
        for r in rows
    ]
    widths = [max(len(str(x[i])) for x in [head, *table]) for i in range(len(head))]
    return [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [head, *table]
    ]


def removing_rows(root: Path) -> list[dict]:
    """One row per `.NAME#removing-<random>` folder: a removal under way (its env mutex held)
    or one that was killed or failed midway (`remove NAME` finishes it)."""
    from envtool.adapters.install.install_state import leftover_name
    from envtool.adapters.mutex import env_mutex_busy

    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    rows = []
    for entry in entries:
        name = leftover_name(entry)
        if name is None:
            continue
        rows.append(
            {
                "name": name,
                "state": "removing",
                "interrupted": not env_mutex_busy(root / name),
                "flavor": None,
                "cuda": None,
                "torch": None,
                "lock_sha256": None,
                "prefix": str(entry),
            }
        )
    return rows


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(as_json: bool) -> Result:
    """List installed environments; `incomplete` means an install was interrupted."""
    from envtool.adapters.install.install_state import leftover_name
    from envtool.adapters.install.installed import describe_env
    from envtool.adapters.locate import envs_dir, list_env_prefixes

    rows = [describe_env(p) for p in list_env_prefixes() if leftover_name(p) is None]
    rows += removing_rows(envs_dir())
    text = render_env_table(rows) or [f"no environments under {envs_dir()}"]
    from envtool.adapters.install.installed import finish_command

    for r in rows:  # each unfinished install gets the command that finishes it (its own lock)
        if r["state"] == "incomplete":
            r["finish_command"] = finish_command(r)
            text.append(
                f"{r['name']} is incomplete (an install was interrupted): run "
                f"`{r['finish_command']}` to finish it"
            )
    for r in rows:
        if r["state"] == "removing" and r.get("interrupted"):
            from envtool.core.hints import remove_command

            r["finish_command"] = remove_command(envs_dir() / r["name"], envs_dir())
            text.append(
                f"{printable(r['name'])} was being removed (interrupted): run "
                f"`{r['finish_command']} --yes` to finish it"
            )
    return Result("list", {"envs_dir": str(envs_dir()), "environments": rows}, text)
