"""The click CLI: parses, calls a command module, renders, maps errors to exit codes.

Subcommands load lazily so `envtool --help` imports no rattler, conda-lock or yaml. The top-level
`envtool --help` / `-h` does not import click either (click is ~half of that command's time): it
prints the same text click would, from the same strings (tests/cli/test_cli_help.py compares them),
and falls back to click when a line would need wrapping (a terminal narrower than 80 columns).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from envtool import __version__

GROUP_HELP = "envtool: CUDA-correct, reproducible PyTorch multi-GPU environments."
DEBUG_HELP = "Show tracebacks instead of one-line errors."
VERSION_HELP = "Show the version and exit."
HELP_HELP = "Show this message and exit."
OFFLINE_HELP = "No network: packages and repodata from the cache only."
NO_COLOR_HELP = "No color (also: NO_COLOR=1; none when not a terminal)."

# name -> (module, one-line help). Help text lives here so `--help` needs no imports.
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": (
        "envtool.commands.doctor",
        "Diagnose the CUDA stack of this host and an environment.",
    ),
    "inspect": ("envtool.commands.inspect", "Report what CUDA any environment file asks for."),
    "create": (
        "envtool.commands.create",
        "Plan, solve, lock and install a CUDA-matched environment.",
    ),
    "lock": ("envtool.commands.lock", "Re-lock an environment (no-op when inputs are unchanged)."),
    "config": ("envtool.commands.config", "Show the settings in force and where each comes from."),
    "add": ("envtool.commands.add", "Add packages to an environment, re-lock, install."),
    "drop": ("envtool.commands.drop", "Drop packages from an environment, re-lock, install."),
    "update": (
        "envtool.commands.update",
        "Update packages to the newest allowed, re-lock, install.",
    ),
    "export": ("envtool.commands.export", "Write a portable environment.yml (or @EXPLICIT file)."),
    "install": ("envtool.commands.install", "Install an environment from its lock."),
    "list": ("envtool.commands.list", "List installed environments and their state."),
    "info": ("envtool.commands.info", "Show one environment's plan, lock and state."),
    "remove": ("envtool.commands.remove", "Remove an installed environment."),
    "verify": ("envtool.commands.verify", "Compare an installed environment with its lock."),
    "run": ("envtool.commands.run", "Run a command inside an activated environment."),
    "shell-hook": ("envtool.commands.shell_hook", "Print the activation script for eval."),
    "bundle": (
        "envtool.commands.bundle",
        "Write the lock plus a local channel for offline installs.",
    ),
    "init": ("envtool.commands.init", "Write a training-script template."),
    "launch": (
        "envtool.commands.launch",
        "Run a training script through torchrun in an environment.",
    ),
    "logs": ("envtool.commands.logs", "Print a run's merged log (every rank, prefixed)."),
    "runs": ("envtool.commands.runs", "List launched runs from their manifests."),
}


# `envtool --help` lists the commands by workflow, in the order a user meets them; a command in
# no section is listed under "Other commands" (none is ever hidden by being left out here).
SECTIONS: list[tuple[str, list[str]]] = [
    ("Environments", ["create", "install", "list", "info", "run", "shell-hook", "remove"]),
    ("Packages", ["add", "drop", "update"]),
    ("Locks & sharing", ["lock", "export", "bundle", "inspect"]),
    ("Diagnose", ["doctor", "verify", "config"]),
    ("Train & run", ["init", "launch", "runs", "logs"]),
]


def _command_sections() -> list[tuple[str, list[tuple[str, str]]]]:
    placed = {name for _, names in SECTIONS for name in names}
    sections = [
        (title, [(n, COMMANDS[n][1]) for n in names if n in COMMANDS]) for title, names in SECTIONS
    ]
    rest = [(n, COMMANDS[n][1]) for n in sorted(COMMANDS) if n not in placed]
    return [(t, rows) for t, rows in [*sections, ("Other commands", rest)] if rows]


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns (what click uses), without importing shutil."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _dl(rows: list[tuple[str, str]], width: int = 10_000) -> list[str] | None:
    """click's HelpFormatter.write_dl at indent 2, or None when click would wrap a row's text
    (longer than its text_width at this formatter width)."""
    first_col = min(max(len(a) for a, _ in rows), 30) + 2
    if any(len(b) > max(width - first_col - 2, 10) for _, b in rows):
        return None
    return [f"  {a}{' ' * (first_col - len(a))}{b}" for a, b in rows]


def fast_help(width: int | None = None) -> str | None:
    """The text of `envtool --help` as click formats it, or None when click must do it (a line
    would wrap). width: click's formatter width (default: from the terminal, as click does)."""
    if width is None:
        width = max(min(_terminal_columns(), 80) - 2, 50)
    options = [
        ("--version", VERSION_HELP),
        ("--debug", DEBUG_HELP),
        ("--offline", OFFLINE_HELP),
        ("--no-color", NO_COLOR_HELP),
        ("-h, --help", HELP_HELP),
    ]
    lines = ["Usage: envtool [OPTIONS] COMMAND [ARGS]...", "", f"  {GROUP_HELP}", ""]
    blocks = [("Options", options), *_command_sections()]
    for i, (title, rows) in enumerate(blocks):
        dl = _dl(rows, width)
        if dl is None:
            return None
        lines += ["", f"{title}:", *dl] if i else [f"{title}:", *dl]
    if any(len(line) > width for line in lines):
        return None
    return "\n".join(lines) + "\n"


_CLI = None


def _click_cli():  # -> click.Group
    """Build the click group on first use (importing click costs ~25 ms)."""
    global _CLI
    if _CLI is not None:
        return _CLI
    import click

    class LazyGroup(click.Group):
        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted(COMMANDS)

        def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
            if name not in COMMANDS:
                return None
            return _with_global_flags(importlib.import_module(COMMANDS[name][0]).cmd)

        def resolve_command(
            self, ctx: click.Context, args: list[str]
        ) -> tuple[str | None, click.Command | None, list[str]]:
            name = args[0] if args else ""
            if name and name not in COMMANDS and not name.startswith("-"):
                import difflib

                close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.6)
                if close:
                    ctx.fail(f"No such command {name!r}. Did you mean {close[0]!r}?")
            return super().resolve_command(ctx, args)

        def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            for title, rows in _command_sections():
                with formatter.section(title):
                    formatter.write_dl(rows)

    @click.group(
        cls=LazyGroup, help=GROUP_HELP, context_settings={"help_option_names": ["-h", "--help"]}
    )
    @click.version_option(__version__, prog_name="envtool", help=VERSION_HELP)
    @click.option("--debug", is_flag=True, help=DEBUG_HELP)
    @click.option("--offline", is_flag=True, help=OFFLINE_HELP)
    @click.option("--no-color", is_flag=True, help=NO_COLOR_HELP)
    @click.pass_context
    def cli(ctx: click.Context, debug: bool, offline: bool, no_color: bool) -> None:
        from envtool.adapters.config import apply_config

        ctx.ensure_object(dict)
        _set_debug(ctx, None, debug)
        _set_no_color(ctx, None, no_color)
        # settings files become environment variables below any already set (flag > variable
        # > envtool.toml > the user's config.toml): docs/config.md
        ctx.obj["config"] = apply_config(offline)

    _CLI = cli
    return cli


# The group's flags, accepted after the command name too (`envtool doctor --no-color`, as
# `envtool --no-color doctor`): name -> (help, what it does). One table for both places.
# --debug and --json as click parsed them: "debug"/"json" once given where envtool reads its own
# flags; "parsed" once the command's own options were read, after which a `--debug` or `--json`
# elsewhere in argv is a program's (`envtool run -n e python x.py --json`), not envtool's
_PARSED: dict[str, bool] = {}


def _set_debug(ctx: Any, param: Any, value: bool) -> None:
    if param is not None:  # the command's option (the group's callback passes None)
        _PARSED["parsed"] = True
    if value:
        _PARSED["debug"] = True
        ctx.ensure_object(dict)
        ctx.obj["debug"] = True


def _record_json(ctx: Any, param: Any, value: bool) -> bool:
    if value:
        _PARSED["json"] = True
    return value


def _asked(flag: str, args: list[str]) -> bool:
    """envtool's own --debug (show tracebacks) or --json (the error envelope): as parsed; before
    the command's options were read (a usage error, a settings file refused by the group), any
    such flag before `--`."""
    if _PARSED.get("parsed"):
        return _PARSED.get(flag, False)
    return f"--{flag}" in (args[: args.index("--")] if "--" in args else args)


def _set_no_color(ctx: Any, param: Any, value: bool) -> None:
    if value:
        from envtool.output import set_no_color

        set_no_color()


def _set_offline(ctx: Any, param: Any, value: bool) -> None:
    if value:  # after the group applied the settings files: the flag still beats them
        from envtool.adapters.config import apply_offline_flag

        ctx.ensure_object(dict)
        apply_offline_flag(ctx.obj.setdefault("config", {}))


GLOBAL_FLAGS = {
    "--debug": (DEBUG_HELP, _set_debug),
    "--offline": (OFFLINE_HELP, _set_offline),
    "--no-color": (NO_COLOR_HELP, _set_no_color),
}


def _with_global_flags(command: Any) -> Any:  # a click.Command, its flags added
    """Every command takes the group's flags after its name (`git`- and `pixi`-style users put
    them there); a command's own option of the same name keeps its meaning. Added once, to the
    command object its module holds."""
    if getattr(command, "envtool_global_flags", False):
        return command
    import click

    taken = {opt for p in command.params for opt in getattr(p, "opts", ())}
    for param in command.params:
        if "--json" in getattr(param, "opts", ()) and param.callback is None:
            param.callback = _record_json
    for flag, (help_text, callback) in GLOBAL_FLAGS.items():
        if flag not in taken:
            command.params.append(
                click.Option([flag], is_flag=True, expose_value=False, help=help_text,
                             callback=callback)
            )  # fmt: skip
    command.envtool_global_flags = True
    return command


def __getattr__(name: str):  # `from envtool.cli import cli` still works
    if name == "cli":
        return _click_cli()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    from envtool.errors import EnvtoolError

    args = list(sys.argv[1:] if argv is None else argv)
    for name in ("stdout", "stderr"):  # started with the descriptor closed (`>&-`, a daemon)
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (for the process's life)
    if args in (["--help"], ["-h"]):
        text = fast_help()
        if text is not None:
            sys.stdout.write(text)
            sys.stdout.flush()
            sys.exit(0)
    if len(args) == 2 and args[0] == "lock" and not args[1].startswith("-"):
        _answer_noop_lock(args[1])  # exits when the lock is fresh; else the full command below
    import click

    cli = _click_cli()
    _PARSED.clear()  # main() runs more than once in one process (the tests)
    try:
        # standalone_mode=False makes click *return* the code of a raised click Exit
        rc = cli.main(args=args, prog_name="envtool", standalone_mode=False)
        if type(rc) is int and rc != 0:
            sys.exit(rc)
    except click.exceptions.Abort as exc:  # a question answered no, or Ctrl-C (click's Abort)
        ctrl_c = isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt)
        click.echo("Interrupted." if ctrl_c else "Aborted.", err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        import io

        from envtool.output import terminal_text

        if _command_name(args) == "create" and exc.message.startswith("Got unexpected extra"):
            # conda's `create -n foo python=3.11 numpy`: packages after the name
            exc.message += (
                "; create takes no packages: pin with --python 3.11 / --torch 2.7, then add "
                "others with `envtool add NAME PKG`"
            )

        if _asked("json", args):  # a usage error is an answer too: the envelope, like any error
            from envtool.output import render_error_json

            command = _command_name(args)
            where = "envtool" if command == "envtool" else f"envtool {command}"
            message = exc.format_message()
            sys.stdout.write(render_error_json(command, message, f"see `{where} --help`", 2) + "\n")
        shown = io.StringIO()  # click echoes the bad value: escape it like every other line
        exc.show(file=shown)
        sys.stderr.write(terminal_text(shown.getvalue()))
        sys.stderr.flush()
        sys.exit(2)
    except EnvtoolError as exc:
        if _asked("debug", args):  # the traceback, and still the error's exit code (2: usage)
            import traceback

            traceback.print_exc()
            sys.exit(exc.exit_code)
        from envtool.output import render_error_json

        if _asked("json", args):
            sys.stdout.write(
                render_error_json(_command_name(args), exc.message, exc.hint, exc.exit_code) + "\n"
            )
        from envtool.core.shell_quote import printable
        from envtool.output import write_line

        # one line, whatever the message holds: names, lock fields, probed text
        write_line(sys.stderr, f"envtool: error: {printable(exc.one_line())}")
        sys.stderr.flush()
        _echo_detail(exc.detail)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except OSError as exc:
        # last resort for a file error no command foresaw (permissions, a too-long name, a full
        # disk): one line naming the file, never a traceback
        if _asked("debug", args):
            import traceback

            traceback.print_exc()
            sys.exit(2)
        from envtool.core.shell_quote import printable

        what = exc.filename if exc.filename is not None else "a file"
        message = f"{printable(str(what))}: {exc.strerror or exc}"
        if _asked("json", args):
            from envtool.output import render_error_json

            hint = "check the path and its permissions"
            sys.stdout.write(render_error_json(_command_name(args), message, hint, 2) + "\n")
        click.echo(f"envtool: error: {message} — check the path and its permissions", err=True)
        sys.exit(2)
    sys.exit(0)


def _answer_noop_lock(name: str) -> None:
    """A plain `envtool lock NAME` whose lock is fresh, answered before click is imported (click
    was a third of the no-op: docs/benchmarks-scaling.md) with the same test and the same Result
    as the lock command (workflows/lock_fresh.py), printed by the same `emit`. Anything else —
    stale, missing, an error — returns, with the environment as it was, and the lock command
    does it all again and says what it says."""
    before = dict(os.environ)
    try:
        from envtool.adapters.config import apply_config
        from envtool.workflows.lock_fresh import noop_lock_result

        apply_config()  # as the group does: a settings file may name the channels' mirrors
        result = noop_lock_result(name)
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        sys.exit(130)
    except Exception:  # the lock command meets the same error and reports it (or --debug it)
        result = None
    if result is None:
        os.environ.clear()
        os.environ.update(before)
        return
    from envtool.output import emit

    try:
        emit(result, False)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader is gone (`| head -0`): as click does, quietly exit 1
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the interpreter flushes it at exit)
        sys.exit(1)
    sys.exit(result.exit_code)


def _echo_detail(detail: str | None) -> None:
    """Lines under the error line, indented as they came (a solver's explanation tree), each
    with its control characters escaped."""
    if not detail:
        return
    from envtool.core.shell_quote import printable

    for line in detail.splitlines():
        sys.stderr.write(f"  {printable(line)}\n")
    sys.stderr.flush()


def _command_name(args: list[str]) -> str:
    return next((a for a in args if a in COMMANDS), "envtool")
