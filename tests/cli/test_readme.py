"""README stays honest: every `envtool` command in its code blocks parses, and the safe ones run.

The commands are found by readme_commands.py (its docstring has the extractor's rules).
Each command is parsed by the real click CLI (group, then subcommand, `make_context` only: no
callback runs). The handful that need no GPU, no network and no remote channel (create uses the
local fixture channel it names) then run for real in a tmp dir.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from readme_commands import (
    COMMANDS,
    README_TEXT,
    SYNOPSES,
    Command,
    Synopsis,
    blocks,
    envtool_argvs,
    extract,
    readme_command,
)

from envtool.cli import _click_cli

RunCli = Callable[..., tuple[int, str, str]]  # conftest's run_cli fixture

# The README has ~40 commands; fewer means the extractor broke (or README lost most of them).
MIN_COMMANDS = 30


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
    (argv,) = list(envtool_argvs(synopsis.text))
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


def readme_files(text: str) -> dict[str, str]:
    """Files README's transcripts write with `cat > F <<'EOF'` or `printf '...' > F`."""
    files: dict[str, str] = {}
    for block in blocks(text):
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
