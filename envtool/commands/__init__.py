"""One module per verb. Each exposes a click command `cmd`; cli.py loads them lazily."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from envtool.output import Result
    from envtool.workflows.lock import LockOutcome

# Options several commands share live here, not in one command module (commands never import
# each other). `create`, `lock` and `export` find environments/NAME under the same project folder.
project_dir_option = click.option(
    "--dir",
    "directory",
    default=None,
    type=click.Path(file_okay=False),
    help="Project folder holding environments/ (default: .).",
)


def relock_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options `add`, `drop` and `update` share: --dir, --no-install, --dry-run, --json."""
    for option in reversed(
        (
            project_dir_option,
            click.option("--no-install", is_flag=True, help="Re-lock only; install nothing."),
            click.option(
                "--dry-run", is_flag=True, help="Solve and print the lock diff; write nothing."
            ),
            click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope."),
        )
    ):
        func = option(func)
    return func


def renders(func: Callable[..., Any]) -> Callable[..., None]:
    """The one place a command's outcome becomes output and an exit code: the command returns a
    `Result` (or raises an EnvtoolError, which cli.py renders); this prints it with
    `output.emit` (--json: the envelope) and exits with its `exit_code`. Put it right above
    `def cmd`, under the click decorators. A command that returns None printed nothing (run
    execs the user's command and never returns)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        result = func(*args, **kwargs)
        if result is None:
            return
        from envtool.output import emit

        emit(result, bool(kwargs.get("as_json", False)))
        if result.exit_code:
            raise click.exceptions.Exit(result.exit_code)

    return wrapper


def summarize_lock(outcome: LockOutcome, name: str, command: str, dry_run: bool) -> Result:
    """`create`'s and `lock`'s Result: the plan, then what was written (or that nothing was)."""
    from envtool.core.plan import render_plan
    from envtool.output import Result

    plan = outcome.plan
    data: dict[str, Any] = {
        "name": name,
        "env_dir": str(outcome.env_dir),
        "changed": outcome.changed,
        "written": outcome.written,
        "dry_run": dry_run,
        "input_hash": outcome.input_hash,
        "packages": outcome.packages,
        "pip_packages": outcome.pip,
        "plan": plan.to_dict() if plan else None,
        "lock_diff": outcome.diff.to_dict() if outcome.diff else None,
    }
    text = render_plan(plan) if plan else []
    if outcome.diff is not None:
        from envtool.core.lock_diff import render_lock_diff

        text += render_lock_diff(outcome.diff)
    if not outcome.changed:
        text.append(f"{name}: lock is up to date ({outcome.env_dir / 'conda-lock.yml'})")
    else:
        counts = ", ".join(f"{p}: {n} packages" for p, n in outcome.packages.items())
        solved = f" ({counts})" if counts else ""
        if not outcome.written:
            text.append(f"dry run: nothing written{solved}")
        elif command == "lock":  # lock re-solves the request; it never rewrites environment.yml
            text.append(f"wrote {outcome.env_dir / 'conda-lock.yml'}{solved}")
        else:
            text.append(f"wrote {outcome.env_dir / 'environment.yml'} and conda-lock.yml{solved}")
    return Result(command, data, text)
