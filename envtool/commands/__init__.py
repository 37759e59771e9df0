"""One module per verb. Each exposes a click command `cmd`; cli.py loads them lazily."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from envtool.adapters.locate import Target


# Options several commands share live here, not in one command module (commands never import
# each other). `create`, `lock` and `export` find environments/NAME under the same project folder.
def _project_settings(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """`--dir P`: P's envtool.toml in force, not the current folder's (the group applied that one
    before the command's options were read), as pixi's --manifest-path reads that manifest."""
    if value is not None:
        from envtool.adapters.config import apply_config

        ctx.ensure_object(dict)
        ctx.obj["config"] = apply_config(directory=value, applied=ctx.obj.get("config"))
    return value


project_dir_option = click.option(
    "--dir",
    "directory",
    default=None,
    type=click.Path(file_okay=False),
    callback=_project_settings,
    help="Project folder holding environments/ and its envtool.toml (default: .).",
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


def _refuse_gpu_count(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    from envtool.core.shell_quote import quote_posix
    from envtool.errors import UsageError

    raise UsageError(
        f"{ctx.info_name} --gpus {quote_posix(value)}: {ctx.info_name} plans for GPU "
        "architectures, not a GPU count",
        "name the GPU's compute capability with --gpu CC (e.g. --gpu 8.0; --cuda auto reads "
        "this host's); how many GPUs to train on is `envtool launch train.py --gpus N`",
    )


# `create --gpus 2` is a user thinking of launch's count: say which flag means what
gpus_mistake_option = click.option(
    "--gpus",
    "gpu_count",
    expose_value=False,
    hidden=True,
    callback=_refuse_gpu_count,
    is_eager=True,
)  # its own name: create's `--gpu` is stored as `gpus`, and sharing it fed --gpu 8.0 here


def confirmed(question: str) -> bool:
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


def adopt_confirmed(target: Path | str, yes: bool) -> bool:
    """May an install replace the environment at target that envtool did not install (conda's,
    pixi's)? True with --yes or a "y" at the terminal (conda create asks the same of an
    existing env); False when there is none there; a "no" (or no terminal) is the refusal,
    raised here, before any solve or mutex."""
    from envtool.adapters.install.install_state import foreign_packages, refuse_foreign_env

    if yes:
        return True
    n = foreign_packages(target)
    if not n:
        return False
    question = f"{target} is an environment envtool did not install ({n} packages); replace "
    if confirmed(question + "its packages with the lock's?"):
        return True
    refuse_foreign_env(target, n)
    return False


_YES = "Replace without asking: an existing environment envtool did not install (conda's, pixi's)"
yes_option = click.option("--yes", "-y", is_flag=True, help=_YES + ".")
create_yes_option = click.option(
    "--yes",
    "-y",
    is_flag=True,
    help=_YES + "; an environment.yml edited since it was locked or whose packages this "
    "request drops; an env of this name that another project's lock installed.",
)


def env_name(
    func: Callable[..., Any] | None = None, *, required: bool = False, rest: str | None = None
) -> Callable[..., Any]:
    """NAME, the one way to name an environment: a positional NAME, and `-n/--name NAME` as an
    alias (conda's spelling; launch and run, whose positional slot is the script, take -n).
    Put it among the click decorators (`@env_name` or `@env_name(required=True)`); the command
    receives `name`. `rest`: the variadic argument after NAME (add's PKG…): with -n NAME every
    positional is one of those (`envtool add -n train numpy`, as `conda install -n train numpy`)."""
    if func is None:
        return functools.partial(env_name, required=required, rest=rest)

    @functools.wraps(func)
    def wrapper(*args: Any, name_option: str | None = None, **kwargs: Any) -> Any:
        from envtool.errors import UsageError

        name = kwargs.get("name")
        if rest is not None and name_option is not None and name is not None:
            kwargs[rest], name = (name, *kwargs[rest]), None  # click put the first PKG in NAME
        for given in (name, name_option):
            if given is not None and _looks_like_spec(given):
                raise _spec_as_name(given)
        if name_option is not None and name is not None and name_option != name:
            raise UsageError(
                f"NAME {name!r} and -n {name_option!r} disagree", "name the environment once"
            )
        kwargs["name"] = name if name is not None else name_option
        if required and kwargs["name"] is None:
            raise UsageError("no environment NAME given", "pass NAME (or -n NAME)")
        return func(*args, **kwargs)

    wrapper = click.option(
        "-n", "--name", "name_option", metavar="NAME", help="Same as NAME (conda's spelling)."
    )(wrapper)
    # required: click must not demand the positional (-n NAME stands in for it), but the usage
    # line says NAME, not [NAME]
    metavar = "NAME" if required else None
    return click.argument("name", required=False, metavar=metavar)(wrapper)


def _looks_like_spec(given: str) -> bool:
    """A NAME with = < or > that names nothing: conda allows `=` in env names, so one that
    exists (or a path: `/scratch/job=42/env`) is still a name."""
    import os

    if not any(c in given for c in "=<>") or os.path.isabs(given):
        return False
    from envtool.adapters.locate import env_prefix
    from envtool.errors import UsageError

    try:
        return not os.path.lexists(env_prefix(given))
    except UsageError:  # not a name an env could have either: the spec reading is the likelier
        return True


def _spec_as_name(given: str) -> Exception:
    """`envtool create -n foo python=3.11` (conda's habit: packages after the name): a NAME with
    = < or > is a package spec, never an env name; create took `pytorch=2.13` as one."""
    from envtool.core.shell_quote import printable
    from envtool.errors import UsageError

    command = click.get_current_context().info_name
    if command == "create":
        hint = "create takes no packages: pin with --python 3.11 / --torch 2.7, then add others "
        hint += "with `envtool add NAME PKG`"
    else:
        hint = "name the environment (see `envtool list`); packages go to `envtool add NAME PKG`"
    return UsageError(f"NAME {printable(given)!r} is a package spec, not an environment name", hint)


def resolve_and_say(
    command: str,
    verb: str,
    name: str | None = None,
    prefix: str | None = None,
    python: str | None = None,
) -> Target:
    """**The** target of a command that acts on one environment (locate.resolve_target over
    core/target's rule), said in one line on stderr: which environment and why."""
    from envtool.adapters.locate import resolve_target

    target = resolve_target(name, prefix, python)
    _PENDING[:] = [f"envtool {command}: {target.describe(verb)}"]
    return target


def refuse_own_env(
    target: Target, command: str, rest: str = "", other: str = "--prefix PATH"
) -> None:
    """For commands about an environment the user owns (its lock, its drift, `run`): with
    nothing named and nothing active, envtool's own python is not what the user meant; say
    what is missing. `rest`: what follows NAME in the example (run's ` -- CMD`); `other`: the
    command's other way to name one (export's --lock FILE)."""
    from envtool.errors import UsageError

    if target.is_own:
        raise UsageError(
            f"{command}: no environment is active and none was named",
            f"pass NAME (see `envtool list`) or {other}, or activate the environment: "
            f"envtool {command} NAME{rest}",
        )


# The target line waits until the command does its work (say_target: before a launch, an exec,
# or the Result): an error before then stays the one line it names, and names the env itself.
_PENDING: list[str] = []


def say_target() -> None:
    """Print the pending target line (stderr), once."""
    from envtool.output import note

    for line in _PENDING:
        note(line)
    _PENDING.clear()


def target_data(target: Target, verb: str) -> dict[str, Any]:
    """The target as --json carries it: the same facts and the same line as stderr."""
    return {**target.to_dict(), "line": target.describe(verb)}


def renders(func: Callable[..., Any]) -> Callable[..., None]:
    """The one place a command's outcome becomes output and an exit code: the command returns a
    `Result` (or raises an EnvtoolError, which cli.py renders); this prints it with
    `output.emit` (--json: the envelope) and exits with its `exit_code`. Put it right above
    `def cmd`, under the click decorators. A command that returns None printed nothing (run
    execs the user's command and never returns)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        _PENDING.clear()  # one command a process, but tests run many in one
        result = func(*args, **kwargs)
        say_target()
        if result is None:
            return
        from envtool.output import emit

        emit(result, bool(kwargs.get("as_json", False)))
        if result.exit_code:
            raise click.exceptions.Exit(result.exit_code)

    return wrapper
