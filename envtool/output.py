"""Rendering results: human text or one versioned JSON envelope. Commands return a Result;
`envtool.commands.renders` (the one place) prints it with `emit` and exits with its code."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

JSON_VERSION = 1


@dataclass
class Result:
    """What a command produced: data for --json, lines for humans, and the exit code it implies.
    `raw`: output that is itself a file or a script (export's environment.yml, shell-hook's
    activation text), written to stdout byte for byte instead of `text`."""

    command: str
    data: dict[str, Any] = field(default_factory=dict)
    text: list[str] = field(default_factory=list)
    exit_code: int = 0
    raw: str | None = None


def render_json(result: Result) -> str:
    envelope = {"version": JSON_VERSION, "command": result.command, "exit_code": result.exit_code}
    envelope.update(result.data)
    return _masked(json.dumps(envelope, indent=2, sort_keys=False, default=str))


def _masked(text: str) -> str:
    """JSON on stdout: a URL's credentials masked, like every line for the terminal."""
    from envtool.core.credentials import redact_credentials

    return redact_credentials(text)


def render_error_json(command: str, message: str, hint: str | None, exit_code: int) -> str:
    return _masked(
        json.dumps(
            {
                "version": JSON_VERSION,
                "command": command,
                "exit_code": exit_code,
                "error": {"message": message, "hint": hint},
            },
            indent=2,
        )
    )


def emit(result: Result, as_json: bool) -> None:
    """Print `result`. Human text is where values from probes, locks, conda-meta and names reach
    the terminal: control characters in them are escaped here (an ESC sequence in a GPU name
    must not drive the terminal); a newline stays a line break. JSON needs nothing: json.dumps
    writes ESC as \\u001b."""
    if as_json:
        sys.stdout.write(render_json(result) + "\n")
    elif result.raw is not None:  # a file's or a script's text, as click.echo always wrote it
        import click

        click.echo(result.raw, nl=False)
    else:
        for line in result.text:
            sys.stdout.write(terminal_text(line) + "\n")
    sys.stdout.flush()


def terminal_text(text: str) -> str:
    """`text` for a terminal: control characters but newline and tab shown as \\xNN."""
    from envtool.core.shell_quote import printable

    return printable(str(text), keep_newlines=True)


def note(message: str) -> None:
    """Progress and diagnostics go to stderr so stdout stays parseable (escaped like emit)."""
    sys.stderr.write(terminal_text(message) + "\n")
    sys.stderr.flush()
