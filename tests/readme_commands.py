"""The `envtool` commands in README.md's code blocks (test_readme checks them; other tests run
README's transcripts through them).

What counts as a command (the extractor's rules):

- Only lines inside fenced code blocks.
- A block with at least one `$ ` prompt line is a console transcript: only its prompt lines are
  commands, everything else is output. A block without prompts is all commands.
- A line ending in `\\` continues onto the next line.
- Lines are split into words the way a POSIX shell does (shlex): quotes are removed, `# comment`
  is dropped, and `&&`, `||`, `;` and `|` separate commands. A command is envtool's when its first
  word (after `VAR=value` assignments) is `envtool`; `$(envtool ...)` inside a word counts too.
- A line with a word containing `[`, `]`, `…` or `...` is a synopsis (grammar such as
  `envtool doctor [NAME] [--json]`), not a command: it is not parsed, but each option it names
  (`-o`, `--opt`) must exist. An indented line starting with `[` continues a synopsis.
- Words after a bare `--` belong to the script, not to envtool: they go to click after the `--`,
  which click passes through as positional arguments without reading them as options.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

from conftest import REPO

README_PATH = REPO / "README.md"

_SHELL_OPERATORS = {"&&", "||", ";", "|", "&"}
_SYNOPSIS_MARKS = ("[", "]", "…", "...")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")


@dataclass(frozen=True)
class Command:
    """One `envtool ...` invocation found in README: its line and argv (without `envtool`)."""

    line: int
    argv: tuple[str, ...]

    @property
    def text(self) -> str:
        return shlex.join(["envtool", *self.argv])


@dataclass(frozen=True)
class Synopsis:
    line: int
    text: str


def blocks(text: str) -> Iterator[list[tuple[int, str]]]:
    """The fenced code blocks of a markdown text, as (line number, line) lists."""
    block: list[tuple[int, str]] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            if block is None:
                block = []
            else:
                yield block
                block = None
        elif block is not None:
            block.append((number, line))


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
    """Simple commands of a word list, split at shell operators."""
    current: list[str] = []
    for word in words:
        if word in _SHELL_OPERATORS:
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
        while segment and _ASSIGNMENT.match(segment[0]):
            segment = segment[1:]
        if segment and segment[0] == "envtool":
            yield segment[1:]


def extract(text: str) -> tuple[list[Command], list[Synopsis]]:
    """Every concrete envtool command and every synopsis line in a markdown text."""
    commands: list[Command] = []
    synopses: list[Synopsis] = []
    for block in blocks(text):
        for number, line in _command_lines(block):
            argvs = list(envtool_argvs(line))
            if not argvs:
                continue
            if any(mark in word for argv in argvs for word in argv for mark in _SYNOPSIS_MARKS):
                synopses.append(Synopsis(number, line.strip()))
            else:
                commands.extend(Command(number, tuple(argv)) for argv in argvs)
    return commands, synopses


README_TEXT = README_PATH.read_text(encoding="utf-8")
COMMANDS, SYNOPSES = extract(README_TEXT)


def readme_command(text: str) -> Command:
    """The README command written as `text`; fails when README no longer has it."""
    found = [command for command in COMMANDS if command.text == text]
    assert found, f"README.md no longer has `{text}`: update RUNNABLE in test_readme.py"
    return found[0]
