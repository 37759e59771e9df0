"""Rendering results: human text or one versioned JSON envelope. Commands return a Result;
`envtool.commands.renders` (the one place) prints it with `emit` and exits with its code."""

from __future__ import annotations

import json
import re
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


# --- the terminal: ASCII where the locale cannot show more, color where it is a terminal -------

# What envtool's own text uses beyond ASCII, and what a non-UTF-8 terminal gets instead.
_ASCII = str.maketrans(
    {
        "→": "->",
        "←": "<-",
        "↔": "<->",
        "✓": "ok",
        "✗": "X",
        "…": "...",
        "—": "-",
        "–": "-",
        "≤": "<=",
        "≥": ">=",
        "×": "x",
        "·": "-",
    }
)
_NO_COLOR = False  # --no-color (cli.py); NO_COLOR is read when asked


def set_no_color() -> None:
    global _NO_COLOR
    _NO_COLOR = True


def for_terminal(text: str, stream: Any) -> str:
    """`text` as `stream` can show it: unchanged on a UTF-8 stream; else envtool's arrows, ticks,
    dashes and ellipses in ASCII, and any other character the encoding lacks as '?', so a
    latin-1 or ASCII locale gets readable lines, never a UnicodeEncodeError."""
    import codecs

    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        if codecs.lookup(encoding).name == "utf-8":
            return text
    except LookupError:
        encoding = "ascii"
    return text.translate(_ASCII).encode(encoding, "replace").decode(encoding)


def color_enabled(stream: Any) -> bool:
    """Color only on a terminal, never with NO_COLOR set (no-color.org) or --no-color."""
    import os

    if _NO_COLOR or os.environ.get("NO_COLOR"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


_STYLES = {"red": "31", "yellow": "33", "green": "32", "bold": "1"}
# (what starts a line, the words to color, how): doctor's verdict and marks, errors, warnings
_LINE_STYLES = [
    (re.compile(r"^(envtool doctor: )(OK)\b"), "green"),
    (re.compile(r"^(envtool doctor: )(WARN)\b"), "yellow"),
    (re.compile(r"^(envtool doctor: )(FAIL)\b"), "red"),
    (re.compile(r"^(\s+)(✓|ok)(?= )"), "green"),
    (re.compile(r"^(\s+)(!)(?= )"), "yellow"),
    (re.compile(r"^(\s+)(✗|X)(?= )"), "red"),
    (re.compile(r"^(envtool: )(error:)"), "red"),
    (re.compile(r"^((?:envtool(?: \S+)?: )?)(warning:)"), "yellow"),
]


def paint(line: str) -> str:
    """`line` with its status word colored (ANSI), if it has one. Applied after escaping: the
    only escape sequences on the terminal are these."""
    for pattern, style in _LINE_STYLES:
        m = pattern.match(line)
        if m:
            start, end = m.span(2)
            code = _STYLES[style]
            return f"{line[:start]}\x1b[{code}m{line[start:end]}\x1b[0m{line[end:]}"
    return line


def write_line(stream: Any, line: str) -> None:
    """One line of envtool's text to `stream`: escaped, in the stream's encoding, colored when
    it is a terminal."""
    text = for_terminal(terminal_text(line), stream)
    if color_enabled(stream):
        text = paint(text)
    stream.write(text + "\n")


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
            write_line(sys.stdout, line)
    sys.stdout.flush()


def terminal_text(text: str) -> str:
    """`text` for a terminal: control characters but newline and tab shown as \\xNN."""
    from envtool.core.shell_quote import printable

    return printable(str(text), keep_newlines=True)


def note(message: str) -> None:
    """Progress and diagnostics go to stderr so stdout stays parseable (escaped like emit)."""
    for line in str(message).split("\n"):
        write_line(sys.stderr, line)
    sys.stderr.flush()
