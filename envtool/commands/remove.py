"""`envtool remove NAME`: delete an installed environment (asks first)."""

from __future__ import annotations

from pathlib import Path

import click

from envtool.commands import confirmed, env_name, renders
from envtool.errors import UsageError
from envtool.output import Result, note


@click.command("remove")
@env_name
@click.option("-p", "--prefix", help="The environment's directory instead of NAME.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(name: str | None, prefix: str | None, yes: bool, dry_run: bool, as_json: bool) -> Result:
    """Remove an environment. Refuses directories that are not conda environments."""
    from envtool.adapters.install.install_state import removal_leftovers
    from envtool.adapters.locate import env_prefix
    from envtool.adapters.mutex import hold_env_mutex
    from envtool.workflows.remove import remove_prefix

    target = env_prefix(name, prefix)
    label = name or target.name
    _check_removable(target)
    data = {"prefix": str(target), "dry_run": dry_run, "removed": False}
    leftovers = removal_leftovers(target)
    what = [str(target)] if _present(target) else []
    what += [f"{p} (an interrupted removal)" for p in leftovers]
    if dry_run:
        return Result("remove", data, [f"would remove {w}" for w in what])
    if not yes and not confirmed(f"Remove the whole environment {label} ({target})?"):
        import sys

        if sys.stdin.isatty():  # the user said no: an answer, not an error (exit 1, as apt's)
            return Result("remove", data, [f"not removed: {target}"], exit_code=1)
        raise UsageError("not removed", "pass --yes to remove without asking")
    with hold_env_mutex(target, label, on_wait=note):
        # act on what is there now: another envtool may have removed or re-created it meanwhile
        _check_removable(target)
        text = remove_prefix(target, label)
    # The lock file stays: deleting it would let a process already waiting on the old file and a
    # newcomer on a fresh one both "hold" the lock (filelock's documented pitfall).
    data["removed"] = True
    return Result("remove", data, text)


def _present(target: Path) -> bool:
    return target.is_symlink() or target.exists()


def _check_removable(target: Path) -> None:
    """Refuse what is not an env (or a link to one, or the leftover of a removal)."""
    from envtool.adapters.install.install_state import removal_leftovers
    from envtool.adapters.locate import looks_like_env

    if not _present(target):
        if removal_leftovers(target):
            return
        raise UsageError(
            f"no environment at {target}",
            "see `envtool list`; remove deletes a whole environment (conda env remove), not a "
            "package: envtool drop NAME PKG drops one",
        )
    if target.is_symlink():
        return  # only the link goes (see remove_prefix)
    if not looks_like_env(target):
        raise UsageError(
            f"{target} does not look like a conda environment (no conda-meta/ records)",
            "refusing to delete it; remove it by hand if you are sure",
        )
    nested = _nested_envs(target)
    # a base install: envs/ beside pkgs/ (an env with the conda package has condabin/ too,
    # and neither of those)
    if nested or ((target / "pkgs").is_dir() and (target / "envs").is_dir()):
        held = f": its envs/ holds {nested} environment(s)" if nested else ""
        raise UsageError(
            f"{target} is a conda installation (base){held}",
            "refusing to delete it; remove one environment by name (envtool remove NAME)",
        )
    active = _active_here(target)
    if active:
        raise UsageError(
            f"{target} is the environment {active}",
            "deactivate it first (conda deactivate / deactivate), then remove it",
        )


def _nested_envs(target: Path) -> int:
    """How many environments live under target/envs (a conda root's; bounded look)."""
    import itertools

    try:
        children = itertools.islice((target / "envs").iterdir(), 10_000)
        return sum((c / "conda-meta").is_dir() for c in children)
    except OSError:
        return 0


def _active_here(target: Path) -> str | None:
    """Which activation points into target: removing it would pull the floor from under the
    shell (conda refuses to remove the active env too), or from under envtool itself."""
    import os
    import sys

    try:
        real = target.resolve()
    except OSError:
        return None
    for what, value in (
        ("active in this shell (CONDA_PREFIX)", os.environ.get("CONDA_PREFIX")),
        ("active in this shell (VIRTUAL_ENV)", os.environ.get("VIRTUAL_ENV")),
        ("envtool itself runs from", sys.prefix),
    ):
        if value and Path(value).resolve() == real:
            return what
    return None
