"""`envtool remove NAME`: delete an installed environment (asks first)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from envtool.commands import renders
from envtool.core.shell_quote import printable
from envtool.errors import DiagnosedFailure, EnvtoolError, UsageError
from envtool.output import Result, note


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
@renders
def cmd(name: str | None, prefix: str | None, yes: bool, dry_run: bool, as_json: bool) -> Result:
    """Remove an environment. Refuses directories that are not conda environments."""
    from envtool.adapters.install.install_state import removal_leftovers
    from envtool.adapters.locate import env_prefix
    from envtool.adapters.mutex import hold_env_mutex

    target = env_prefix(name, prefix)
    label = name or target.name
    _check_removable(target)
    data = {"prefix": str(target), "dry_run": dry_run, "removed": False}
    leftovers = removal_leftovers(target)
    what = [str(target)] if _present(target) else []
    what += [f"{p} (an interrupted removal)" for p in leftovers]
    if dry_run:
        return Result("remove", data, [f"would remove {w}" for w in what])
    if not yes and not _confirmed(f"Remove {target}?"):
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
        raise UsageError(f"no environment at {target}", "see `envtool list`")
    if target.is_symlink():
        return  # only the link goes (see remove_prefix)
    if not looks_like_env(target):
        raise UsageError(
            f"{target} does not look like a conda environment (no conda-meta/ records)",
            "refusing to delete it; remove it by hand if you are sure",
        )


def remove_prefix(target: Path, label: str) -> list[str]:
    """Remove the env at `target` (the caller holds its env lock) and any earlier removal's
    leftovers; lines to report.

    The prefix is first renamed to a sibling `.NAME#removing-<random>` (one atomic step), then
    deleted: a kill or a permission error midway leaves that folder, which `list` shows as
    `removing (interrupted)` and the next `remove NAME` (or install) finishes — never an env
    whose conda-meta/ is gone but bin/ lib/ remain under its name.

    A symlink is removed as a link: what it points to may be shared or live elsewhere (scratch),
    and deleting through a link is not what `remove NAME` promises. rmtree refuses links too."""
    from envtool.adapters.install.install_state import move_aside, removal_leftovers

    text: list[str] = []
    if target.is_symlink():
        pointed = os.readlink(target)
        target.unlink()
        text.append(f"removed the link {target} (what it points to, {pointed}, was left alone)")
    elif target.exists():
        try:
            aside = move_aside(target)
        except OSError as exc:
            raise UsageError(
                f"cannot remove {target}: cannot rename it in {target.parent} ({exc.strerror})",
                "nothing was deleted; make that folder writable (or ask its owner) and retry",
            ) from None
        _delete(aside, label, target)
        text.append(f"removed {target}")
    for leftover in removal_leftovers(target):
        _delete(leftover, label, target)
        text.append(f"finished removing {leftover} (an interrupted removal of {label})")
    return text


def finish_interrupted_removal(target: Path, label: str) -> None:
    """Before an install into `target` (its env lock held): delete what an interrupted `remove`
    left beside it. One that cannot be deleted does not block the install; we say how to end it."""
    from envtool.adapters.install.install_state import removal_leftovers

    for leftover in removal_leftovers(target):
        note(f"finishing the interrupted removal of {label} ({leftover})")
        try:
            _delete(leftover, label, target)
        except EnvtoolError as exc:
            note(f"warning: {exc.one_line()}")


def _delete(path: Path, label: str, target: Path) -> None:
    from envtool.adapters.install.install_state import delete_tree
    from envtool.adapters.locate import envs_dir
    from envtool.core.hints import remove_command

    try:
        delete_tree(path)
    except OSError as exc:
        raise DiagnosedFailure(
            f"could not delete everything of {printable(label)}: "
            f"{printable(str(exc.filename))}: {exc.strerror}; what is left is in {printable(str(path))}",
            f"fix the permissions there, then run `{remove_command(target, envs_dir())}` to finish",
        ) from None
