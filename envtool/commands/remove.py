"""`envtool remove NAME`: delete an installed environment (asks first)."""

from __future__ import annotations

import shutil

import click

from envtool.output import Result, emit, note


def _confirmed(question: str) -> bool:
    """Ask on the terminal. No answer at all (stdin at its end: a script, CI, `< /dev/null`)
    is a "no", not click's Abort, which the CLI reports as a Ctrl-C (exit 130)."""
    import sys

    try:
        return click.confirm(question, default=False, err=True)
    except click.Abort:
        if sys.stdin.isatty():  # Ctrl-C / Ctrl-D at the prompt: the user interrupted
            raise
        click.echo("", err=True)
        return False


@click.command("remove")
@click.argument("name", required=False)
@click.option("--prefix", help="The environment's directory instead of NAME.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
def cmd(name: str | None, prefix: str | None, yes: bool, dry_run: bool, as_json: bool) -> None:
    """Remove an environment. Refuses directories that are not conda environments."""
    from envtool.adapters.install_state import hold_env_lock
    from envtool.adapters.locate import env_prefix, looks_like_env
    from envtool.errors import UsageError

    target = env_prefix(name, prefix)
    if not target.exists():
        raise UsageError(f"no environment at {target}", "see `envtool list`")
    if not looks_like_env(target):
        raise UsageError(
            f"{target} does not look like a conda environment (no conda-meta/ records)",
            "refusing to delete it; remove it by hand if you are sure",
        )
    data = {"prefix": str(target), "dry_run": dry_run, "removed": False}
    if dry_run:
        emit(Result("remove", data, [f"would remove {target}"]), as_json)
        return
    if not yes and not _confirmed(f"Remove {target}?"):
        raise UsageError("not removed", "pass --yes to remove without asking")
    with hold_env_lock(target, target.name, on_wait=note):
        shutil.rmtree(target)
    # The lock file stays: deleting it would let a process already waiting on the old file and a
    # newcomer on a fresh one both "hold" the lock (filelock's documented pitfall).
    data["removed"] = True
    emit(Result("remove", data, [f"removed {target}"]), as_json)
