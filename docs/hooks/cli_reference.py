"""mkdocs hook: the command reference is written from the click commands at build time.

A page holding the marker `<!-- envtool:cli-reference -->` gets, in its place, one section per
command: its help text, its usage line and a table of its arguments and options, all read from
the same click objects `envtool --help` prints. Nothing is committed, so nothing can drift
(tests/cli/test_docs.py builds the site and checks every option of every command is on the page).
"""

from __future__ import annotations

import html
import inspect
from typing import Any

MARKER = "<!-- envtool:cli-reference -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render_reference())


def render_reference() -> str:
    """Markdown for the group's options and every command, in `envtool --help`'s sections and
    order (by workflow; a command in no section comes under "Other commands")."""
    import click

    from envtool.cli import _click_cli, _command_sections

    group = _click_cli()
    # the group's own context settings (-h as well as --help): click caches the help option it
    # builds on the command, so a context without them would change `envtool --help` in-process
    root = click.Context(group, info_name="envtool", **group.context_settings)
    parts = ["## Global options\n", _usage(group, root), _param_table(group, root)]
    for title, rows in _command_sections():
        parts.append(f"## {title}\n")
        for name, _ in rows:
            command = group.get_command(root, name)
            if command is None or command.hidden:
                continue
            ctx = click.Context(command, info_name=name, parent=root)
            parts += [f"### envtool {name}\n", _help(command), _usage(command, ctx)]
            parts.append(_param_table(command, ctx))
    return "\n".join(parts)


def _usage(command: Any, ctx: Any) -> str:
    usage = command.get_usage(ctx).removeprefix("Usage: ")
    return f"```text\n{usage}\n```\n"


def _help(command: Any) -> str:
    """The command's docstring: prose paragraphs as text, example lines as a console block."""
    text = inspect.cleandoc(command.help or command.short_help or "")
    out: list[str] = []
    for paragraph in text.split("\n\n"):
        lines = [line for line in paragraph.splitlines() if line.strip() != "\b"]
        if lines and all(line.lstrip().startswith("envtool ") for line in lines):
            out.append("```console\n" + "\n".join(f"$ {line.strip()}" for line in lines) + "\n```")
        elif lines:
            out.append(html.escape(" ".join(line.strip() for line in lines), quote=False))
    return "\n\n".join(out) + "\n"


def _cell(text: str) -> str:
    """Help text as a table cell: `<envs dir>` is text, not a tag; `|` does not end the cell."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ")


def _code_cell(text: str) -> str:
    # inside a code span the table parser already takes `|` literally (an escape would show)
    return f"`{text}`"


def _param_table(command: Any, ctx: Any) -> str:
    import click

    rows = []
    for param in command.get_params(ctx):
        if isinstance(param, click.Argument):
            required = "required" if param.required else "optional"
            many = ", repeatable" if param.nargs == -1 else ""
            rows.append((_code_cell(param.human_readable_name), f"argument ({required}{many})"))
            continue
        record = param.get_help_record(ctx)
        if record is None or "--help" in param.opts:  # hidden; --help is on every command
            continue
        names, help_text = record
        rows.append((_code_cell(names), _cell(help_text)))
    if not rows:
        return ""
    table = ["| argument / option | meaning |", "|---|---|"]
    table += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(table) + "\n"
