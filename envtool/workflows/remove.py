"""Removing an environment: `remove NAME`'s rename-aside-then-delete, and the end of an
interrupted removal that every install into the prefix runs first (workflows/install.py).
The caller holds the env mutex."""

from __future__ import annotations

import os
from pathlib import Path

from envtool.core.shell_quote import printable
from envtool.errors import DiagnosedFailure, EnvtoolError, UsageError
from envtool.output import note


def remove_prefix(target: Path, label: str) -> list[str]:
    """Remove the env at `target` (the caller holds its env mutex) and any earlier removal's
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
    """Before an install into `target` (its env mutex held): delete what an interrupted `remove`
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
