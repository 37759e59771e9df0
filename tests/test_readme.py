"""README stays honest: every `envtool` command in its code blocks parses, and the safe ones run.

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

Each command is parsed by the real click CLI (group, then subcommand, `make_context` only: no
callback runs). The handful that need no GPU, no network and no remote channel (create uses the
local fixture channel it names) then run for real in a tmp dir.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from conftest import REPO

from envtool.cli import _click_cli

RunCli = Callable[..., tuple[int, str, str]]  # conftest's run_cli fixture

README_PATH = REPO / "README.md"
# The README has ~40 commands; fewer means the extractor broke (or README lost most of them).
MIN_COMMANDS = 30

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


def _blocks(text: str) -> Iterator[list[tuple[int, str]]]:
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


def _envtool_argvs(line: str) -> Iterator[list[str]]:
    for segment in _segments(_words(line)):
        for word in segment:
            for inner in _SUBSTITUTION.findall(word):
                yield from _envtool_argvs(inner)
        while segment and _ASSIGNMENT.match(segment[0]):
            segment = segment[1:]
        if segment and segment[0] == "envtool":
            yield segment[1:]


def extract(text: str) -> tuple[list[Command], list[Synopsis]]:
    """Every concrete envtool command and every synopsis line in a markdown text."""
    commands: list[Command] = []
    synopses: list[Synopsis] = []
    for block in _blocks(text):
        for number, line in _command_lines(block):
            argvs = list(_envtool_argvs(line))
            if not argvs:
                continue
            if any(mark in word for argv in argvs for word in argv for mark in _SYNOPSIS_MARKS):
                synopses.append(Synopsis(number, line.strip()))
            else:
                commands.extend(Command(number, tuple(argv)) for argv in argvs)
    return commands, synopses


def _resolve(argv: tuple[str, ...]) -> tuple[click.Context, str, click.Command, list[str]]:
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
    try:
        ctx, name, sub, args = _resolve(command.argv)
        with ctx, sub.make_context(name, args, parent=ctx, resilient_parsing=False):
            pass
    except click.ClickException as exc:
        return exc.format_message()
    return None


README_TEXT = README_PATH.read_text(encoding="utf-8")
COMMANDS, SYNOPSES = extract(README_TEXT)


def _id(item: Command | Synopsis) -> str:
    return f"L{item.line}:{item.text[:60]}"


def test_extractor_finds_the_readme_commands() -> None:
    assert len(COMMANDS) >= MIN_COMMANDS, [c.text for c in COMMANDS]
    assert SYNOPSES, "README's synopsis lines (envtool doctor [NAME] ...) were not recognised"


@pytest.fixture
def no_callbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Running any command's callback fails the test: parsing must not run a command."""
    group = _click_cli()
    ctx = click.Context(group)
    for command in [group, *(group.get_command(ctx, name) for name in group.list_commands(ctx))]:
        assert command is not None

        def refuse(*args: object, _name: str | None = command.name, **kwargs: object) -> None:
            pytest.fail(f"parsing ran the callback of {_name}")

        monkeypatch.setattr(command, "callback", refuse)


@pytest.mark.usefixtures("no_callbacks")
@pytest.mark.parametrize("command", COMMANDS, ids=_id)
def test_readme_command_parses(command: Command) -> None:
    error = parse_error(command)
    assert error is None, f"README.md:{command.line}: `{command.text}`: {error}"


@pytest.mark.parametrize("synopsis", SYNOPSES, ids=_id)
def test_readme_synopsis_names_real_options(synopsis: Synopsis) -> None:
    (argv,) = list(_envtool_argvs(synopsis.text))
    _, _, sub, _ = _resolve(tuple(argv[:1]))
    known = {opt for param in sub.params for opt in (*param.opts, *param.secondary_opts)}
    named = set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", synopsis.text))
    assert named <= known, f"README.md:{synopsis.line}: unknown options {sorted(named - known)}"


SAMPLE = """\
Prose with `envtool prose --ignored` outside a block.

```console
$ envtool doctor --json          # a comment --not-an-option
envtool doctor: OK (output, not a command)
$ envtool create demo --cuda 12.6 \\
    --dry-run
$ envtool lock a --check || envtool lock a
$ CONDA_OVERRIDE_CUDA=12.1 envtool doctor
$ python train.py && envtool launch train.py --cpu -- --max-steps 20 --bogus
```

```bash
envtool run -n e -- python -c 'print(1)'   # run
eval "$(envtool shell-hook e)"
envtool init [DEST] [--template ddp|lm|fsdp]
               [--force]
```
"""


def test_extractor_rules_on_a_sample() -> None:
    commands, synopses = extract(SAMPLE)
    assert [(c.line, c.argv) for c in commands] == [
        (4, ("doctor", "--json")),
        (6, ("create", "demo", "--cuda", "12.6", "--dry-run")),
        (8, ("lock", "a", "--check")),
        (8, ("lock", "a")),
        (9, ("doctor",)),
        (10, ("launch", "train.py", "--cpu", "--", "--max-steps", "20", "--bogus")),
        (14, ("run", "-n", "e", "--", "python", "-c", "print(1)")),
        (15, ("shell-hook", "e")),
    ]
    assert [(s.line, s.text) for s in synopses] == [
        (16, "envtool init [DEST] [--template ddp|lm|fsdp] [--force]")
    ]
    assert all(parse_error(c) is None for c in commands)


@pytest.mark.parametrize(
    ("fake", "says"),
    [
        ("envtool doctor --no-such-option", "--no-such-option"),
        ("envtool inspect", "Missing argument 'FILE'"),
        ("envtool init train.py --template gpt", "'gpt' is not one of"),
        ("envtool launch train.py --nproc 0", "--nproc"),
        ("envtool frobnicate now", "No such command 'frobnicate'"),
    ],
)
def test_a_wrong_readme_command_is_caught(tmp_path: Path, fake: str, says: str) -> None:
    """A README copy with one bad line: the extractor finds it and the check names its line."""
    copy = tmp_path / "README.md"
    copy.write_text(README_TEXT + f"\n```bash\n{fake}   # new\n```\n", encoding="utf-8")
    commands, _ = extract(copy.read_text(encoding="utf-8"))
    assert len(commands) == len(COMMANDS) + 1
    bad = commands[-1]
    assert bad.line == len(README_TEXT.splitlines()) + 3
    error = parse_error(bad)
    assert error is not None and says in error, error


# Commands that run for real: offline, no GPU, no conda channel (or only the local fixture one),
# writing only into the test's tmp dir. Each group runs in order in a fresh directory.
RUNNABLE = {
    "quick start": [
        "envtool init train.py --template lm",
        "envtool launch train.py --dry-run",
        "envtool launch train.py --slurm --cpu --nodes 1 --nproc 2 --dry-run",
    ],
    "templates": ["envtool init --list", "envtool init --template lm"],
    "ddp": ["envtool init train.py", "envtool launch train.py --dry-run"],
    "inspect": ["envtool inspect environment.yml", "envtool inspect rapids.yml"],
}


def readme_command(text: str) -> Command:
    """The README command written as `text`; fails when README no longer has it."""
    found = [command for command in COMMANDS if command.text == text]
    assert found, f"README.md no longer has `{text}`: update RUNNABLE in {Path(__file__).name}"
    return found[0]


def readme_files(text: str) -> dict[str, str]:
    """Files README's transcripts write with `cat > F <<'EOF'` or `printf '...' > F`."""
    files: dict[str, str] = {}
    for block in _blocks(text):
        lines = iter(line for _, line in block)
        for line in lines:
            if heredoc := re.fullmatch(r"\$ cat > (\S+) <<'?(\w+)'?", line):
                name, end = heredoc.groups()
                files[name] = "".join(f"{body}\n" for body in iter(lines.__next__, end))
            elif printf := re.fullmatch(r"\$ printf ('[^']*') > (\S+)", line):
                fmt = shlex.split(printf.group(1))[0]
                run = subprocess.run(["printf", fmt], capture_output=True, text=True, check=True)
                files[printf.group(2)] = run.stdout
    return files


def _run_all(texts: list[str], run_cli: RunCli, cwd: Path) -> None:
    for text in texts:
        command = readme_command(text)
        rc, out, err = run_cli(list(command.argv), cwd)
        assert rc == 0, f"README.md:{command.line}: `{text}` exited {rc}: {out}{err}"


@pytest.mark.integration
@pytest.mark.parametrize("group", RUNNABLE)
def test_safe_readme_commands_run(group: str, run_cli: RunCli, tmp_path: Path) -> None:
    for name, content in readme_files(README_TEXT).items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    _run_all(RUNNABLE[group], run_cli, tmp_path)
    if group in ("quick start", "templates", "ddp"):
        assert (tmp_path / "train.py").is_file()


@pytest.mark.integration
def test_readme_create_and_export_run(fixtures: Path, run_cli: RunCli, tmp_path: Path) -> None:
    """The create example solves against the local fixture channel it names; export reads its
    lock. Its --dir goes to tmp (README writes /tmp/proj); its ../shared/fixtures is the fixture."""
    create = readme_command(
        "envtool create demo --no-install --cuda 12.6 --profile ddp --dir /tmp/proj"
        " --driver 580.65.06 --gpu 9.0"
        " --channel ../shared/fixtures/repodata/harvested-from-pixi-locks/conda-forge"
    )
    argv = list(create.argv)
    argv[argv.index("--dir") + 1] = str(tmp_path)
    channel = argv.index("--channel") + 1
    argv[channel] = str(fixtures / argv[channel].removeprefix("../shared/fixtures/"))
    rc, out, err = run_cli(argv, tmp_path)
    assert rc == 0, f"README.md:{create.line}: exited {rc}: {out}{err}"
    assert (tmp_path / "environments" / "demo" / "conda-lock.yml").is_file()
    _run_all(
        [
            "envtool export demo",
            "envtool export --lock environments/demo/conda-lock.yml --format explicit"
            " -o demo-linux-64.txt",
        ],
        run_cli,
        tmp_path,
    )
    assert "@EXPLICIT" in (tmp_path / "demo-linux-64.txt").read_text().splitlines()
