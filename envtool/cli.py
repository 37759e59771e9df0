"""The click CLI: parses, calls a command module, renders, maps errors to exit codes.

Subcommands load lazily so `envtool --help` imports no rattler, conda-lock or yaml.
"""

from __future__ import annotations

import importlib
import sys

import click

from envtool import __version__

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
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module_name, _ = COMMANDS[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None  # not built yet
            raise
        return module.cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS) if _exists(name)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _exists(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(COMMANDS[name][0]) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envtool")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """envtool: CUDA-correct, reproducible PyTorch multi-GPU environments."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def main(argv: list[str] | None = None) -> None:
    from envtool.errors import EnvtoolError

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        # standalone_mode=False makes click *return* the code of a raised click Exit
        rc = cli.main(args=args, prog_name="envtool", standalone_mode=False)
        if type(rc) is int and rc != 0:
            sys.exit(rc)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except EnvtoolError as exc:
        if debug:
            raise
        from envtool.output import render_error_json

        if "--json" in args:
            sys.stdout.write(
                render_error_json(_command_name(args), exc.message, exc.hint, exc.exit_code) + "\n"
            )
        click.echo(f"envtool: error: {exc.one_line()}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    sys.exit(0)


def _command_name(args: list[str]) -> str:
    return next((a for a in args if a in COMMANDS), "envtool")
