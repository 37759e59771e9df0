"""The `envtool` commands in the code blocks of README.md and of the documentation pages under
docs/ (test_readme checks them all; other tests run the pages' transcripts through them).

The pages are README.md and every docs/**/*.md except docs/evidence/ (records of past GPU runs,
kept as they were run, not instructions to follow).

What counts as a command (the extractor's rules):

- Only lines inside fenced code blocks.
- A block with at least one `$ ` prompt line is a console transcript: only its prompt lines are
  commands, everything else is output. A block without prompts is all commands, unless it is
  fenced as `console` or `text`: then it is all output (what a command printed).
- A line ending in `\\` continues onto the next line.
- Lines are split into words the way a POSIX shell does (shlex): quotes are removed, `# comment`
  is dropped, `&&`, `||`, `;` and `|` separate commands, and a redirection (`> FILE`) is not
  part of the command. A command is envtool's when its first
  word (after `VAR=value` assignments) is `envtool`; `$(envtool ...)` inside a word counts too.
- A line with a word containing `[`, `]`, `…` or `...` is a synopsis (grammar such as
  `envtool doctor [NAME] [--json]`), not a command: it is not parsed, but each option it names
  (`-o`, `--opt`) must exist. An indented line starting with `[` continues a synopsis.
- A line that shlex cannot split (unbalanced quotes) is prose inside a block, such as a diagram,
  unless it starts with `envtool`: then it is a broken command and extraction fails.
- `_ENVTOOL_COMPLETE=… envtool` is click's completion script, not a command line.
- A shell redirection (`> FILE`, `>> FILE`, `2>&1`) is the shell's, not an argument.
- Words after a bare `--` belong to the script, not to envtool: they go to click after the `--`,
  which click passes through as positional arguments without reading them as options.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

import click
from conftest import REPO

from envtool.cli import _click_cli

README_PATH = REPO / "README.md"
DOCS_DIR = REPO / "docs"
NOT_INSTRUCTIONS = ("evidence",)  # docs/ folders whose commands are records, not instructions

_SHELL_OPERATORS = {"&&", "||", ";", "|", "&"}
_REDIRECTIONS = {">", ">>", "<", "&>", ">&", ">|"}
_SYNOPSIS_MARKS = ("[", "]", "…", "...")
OUTPUT_ONLY = ("console", "text")  # fence languages whose blocks without a `$ ` line are output
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")
_STARTS_WITH_ENVTOOL = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*=\S*\s+)*envtool\b")


@dataclass(frozen=True)
class Command:
    """One `envtool ...` invocation found in a page: its line and argv (without `envtool`), and
    the page (README.md, or a path under the repository such as docs/guide/launch.md)."""

    line: int
    argv: tuple[str, ...]
    page: str = "README.md"

    @property
    def text(self) -> str:
        return shlex.join(["envtool", *self.argv])


@dataclass(frozen=True)
class Synopsis:
    line: int
    text: str
    page: str = "README.md"


def fenced(text: str) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """The fenced code blocks of a markdown text: (language, (line number, line) list)."""
    block: list[tuple[int, str]] | None = None
    language = ""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            if block is None:
                block, language = [], line.lstrip()[3:].strip()
            else:
                yield language, block
                block = None
        elif block is not None:
            block.append((number, line))


def blocks(text: str) -> Iterator[list[tuple[int, str]]]:
    """The fenced code blocks of a markdown text, as (line number, line) lists."""
    for _, block in fenced(text):
        yield block


def _command_lines(block: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Shell lines of a block (prompt handling, backslash continuations joined)."""
    prompted = any(line.startswith("$ ") for _, line in block)
    i = 0
    while i < len(block):
        number, line = block[i]
        i += 1
        if prompted:
            if not line.startswith("$ "):
                continue  # output of the command above
            line = line[2:]
        while line.rstrip().endswith("\\") and i < len(block):
            line = line.rstrip()[:-1] + " " + block[i][1].strip()
            i += 1
        # a synopsis wrapped onto an indented `[...]` line is one synopsis
        while not prompted and i < len(block) and block[i][1][:1].isspace():
            if not block[i][1].strip().startswith("["):
                break
            line += " " + block[i][1].strip()
            i += 1
        yield number, line


def _words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def _segments(words: list[str]) -> Iterator[list[str]]:
    """Simple commands of a word list, split at shell operators, without their redirections."""
    current: list[str] = []
    redirect_target = False
    for word in words:
        if redirect_target:
            redirect_target = False
        elif word in _REDIRECTIONS:
            redirect_target = True  # `> file`: neither word is the command's
        elif word in _SHELL_OPERATORS:
            yield current
            current = []
        else:
            current.append(word)
    yield current


def envtool_argvs(line: str) -> Iterator[list[str]]:
    for segment in _segments(_words(line)):
        for word in segment:
            for inner in _SUBSTITUTION.findall(word):
                yield from envtool_argvs(inner)
        completion = False
        while segment and _ASSIGNMENT.match(segment[0]):
            completion |= segment[0].startswith("_ENVTOOL_COMPLETE=")
            segment = segment[1:]
        if segment and segment[0] == "envtool" and not completion:
            yield _without_redirections(segment[1:])


_REDIRECT = re.compile(r"^\d?(>>?|<)(&\d)?$")


def _without_redirections(words: list[str]) -> list[str]:
    """`envtool … > FILE` (a shell redirection: shlex keeps `>` and its target as words)."""
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif _REDIRECT.match(word):
            skip = "&" not in word  # `2>&1` has no target word
        else:
            out.append(word)
    return out


def extract(text: str, page: str = "README.md") -> tuple[list[Command], list[Synopsis]]:
    """Every concrete envtool command and every synopsis line in a markdown text."""
    commands: list[Command] = []
    synopses: list[Synopsis] = []
    for language, block in fenced(text):
        if language in OUTPUT_ONLY and not any(line.startswith("$ ") for _, line in block):
            continue  # what a command printed, shown without the command
        for number, line in _command_lines(block):
            try:
                argvs = list(envtool_argvs(line))
            except ValueError:  # unbalanced quotes: prose in a block (a diagram), not shell
                if _STARTS_WITH_ENVTOOL.match(line):
                    raise ValueError(f"{page}:{number}: cannot split `{line}`") from None
                continue
            if not argvs:
                continue
            if any(mark in word for argv in argvs for word in argv for mark in _SYNOPSIS_MARKS):
                synopses.append(Synopsis(number, line.strip(), page))
            else:
                commands.extend(Command(number, tuple(argv), page) for argv in argvs)
    return commands, synopses


def doc_pages() -> dict[str, str]:
    """README.md and the documentation pages, by path relative to the repository."""
    pages = {"README.md": README_PATH.read_text(encoding="utf-8")}
    for path in sorted(DOCS_DIR.rglob("*.md")):
        rel = path.relative_to(DOCS_DIR)
        if rel.parts[0] not in NOT_INSTRUCTIONS:
            pages[str(path.relative_to(REPO))] = path.read_text(encoding="utf-8")
    return pages


PAGES = doc_pages()
README_TEXT = PAGES["README.md"]
COMMANDS: list[Command] = []
SYNOPSES: list[Synopsis] = []
for _page, _text in PAGES.items():
    _commands, _synopses = extract(_text, _page)
    COMMANDS += _commands
    SYNOPSES += _synopses


def readme_command(text: str) -> Command:
    """The command written as `text` in README.md or a docs page; fails when none has it."""
    found = [command for command in COMMANDS if command.text == text]
    assert found, f"README.md and docs/ no longer have `{text}`: update the test that runs it"
    return found[0]


def page_text(page: str) -> str:
    """The text of README.md or a docs page (a path relative to the repository)."""
    assert page in PAGES, f"{page} is gone: update the test that reads it"
    return PAGES[page]


def resolve(argv: tuple[str, ...]) -> tuple[click.Context, str, click.Command, list[str]]:
    """The group's context and the subcommand with its arguments (group options parsed)."""
    group = _click_cli()
    # the group's options are all flags, so the subcommand is the first word not an option
    split = next((i for i, word in enumerate(argv) if not word.startswith("-")), len(argv))
    ctx = group.make_context("envtool", list(argv))
    name, sub, args = group.resolve_command(ctx, list(argv[split:]))
    assert name is not None and sub is not None
    return ctx, name, sub, args


def parse_error(command: Command) -> str | None:
    """Why click refuses the command (None: it parses). Parses only; runs no callback."""
    if not command.argv:
        return None  # `envtool` alone (its help, or shell completion's script)
    try:
        ctx, name, sub, args = resolve(command.argv)
        with ctx, sub.make_context(name, args, parent=ctx, resilient_parsing=False):
            pass
    except click.ClickException as exc:
        return exc.format_message()
    return None
