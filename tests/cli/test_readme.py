"""README and the docs stay honest: every `envtool` command in their code blocks parses, and the
safe ones run.

The commands are found by readme_commands.py (its docstring has the extractor's rules and the
pages it reads: README.md and docs/). Each command is parsed by the real click CLI (group, then
subcommand, `make_context` only: no callback runs). The handful that need no GPU, no network and
no remote channel (create uses the local fixture channel it names) then run for real in a tmp
dir. README's walkthrough runs whole in tests/install/test_walkthrough.py.
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
    PAGES,
    README_TEXT,
    SYNOPSES,
    Command,
    Synopsis,
    blocks,
    envtool_argvs,
    extract,
    parse_error,
    readme_command,
    resolve,
)

from envtool.cli import _click_cli

RunCli = Callable[..., tuple[int, str, str]]  # conftest's run_cli fixture

# README and the docs have ~60 commands; fewer means the extractor broke (or the pages lost most).
MIN_COMMANDS = 40


def _id(item: Command | Synopsis) -> str:
    return f"{item.page}:L{item.line}:{item.text[:60]}"


def test_extractor_finds_the_commands_of_readme_and_the_docs() -> None:
    assert len(COMMANDS) >= MIN_COMMANDS, [c.text for c in COMMANDS]
    assert SYNOPSES, "the docs' synopsis lines (envtool init [DEST] ...) were not recognised"
    assert {c.page for c in COMMANDS} >= {"README.md", "docs/guide/launch.md"}
    assert not any(page.startswith("docs/evidence/") for page in PAGES)  # records, not instructions


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
    assert error is None, f"{command.page}:{command.line}: `{command.text}`: {error}"


@pytest.mark.parametrize("synopsis", SYNOPSES, ids=_id)
def test_readme_synopsis_names_real_options(synopsis: Synopsis) -> None:
    (argv,) = list(envtool_argvs(synopsis.text))
    _, _, sub, _ = resolve(tuple(argv[:1]))
    known = {opt for param in sub.params for opt in (*param.opts, *param.secondary_opts)}
    named = set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", synopsis.text))
    assert named <= known, (
        f"{synopsis.page}:{synopsis.line}: unknown options {sorted(named - known)}"
    )


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
envtool export e > e.yml
```

```console
envtool doctor: checking envtool's own python (output only: a console block with no prompt)
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
        (18, ("export", "e")),
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
    assert len(commands) == len(extract(README_TEXT)[0]) + 1
    bad = commands[-1]
    assert bad.line == len(README_TEXT.splitlines()) + 3
    error = parse_error(bad)
    assert error is not None and says in error, error


# Commands that run for real: offline, no GPU, no conda channel (or only the local fixture one),
# writing only into the test's tmp dir. Each group runs in order in a fresh directory.
RUNNABLE = {
    "cheat sheet": [
        "envtool init train.py --template lm",
        "envtool launch train.py --dry-run",
        "envtool launch train.py --slurm --cpu --nodes 1 --nproc 2 --dry-run",
    ],
    "templates": ["envtool init --list", "envtool init --template lm"],
    "ddp": ["envtool init train.py", "envtool launch train.py --dry-run"],
    "inspect": ["envtool inspect environment.yml", "envtool inspect rapids.yml"],
    "doctor record and replay": [
        "envtool doctor --record bug-1234/",
        # what-if: this CPU torch (the test extra's) on a host with a driver is doctor's FAIL
        ("envtool doctor --replay bug-1234/ --driver 535.54.03", 1),
    ],
}
# The same, slow: a real CPU run through torchrun, then the run history of the launch guide.
RUNNABLE_SLOW = {
    "launch on the cpu": [
        "envtool init train.py",
        "envtool launch train.py --cpu -- --max-steps 20",
        "envtool runs",
        "envtool runs --json",
        "envtool logs",
    ],
}


def readme_files(text: str) -> dict[str, str]:
    """Files a page's transcripts write with `cat > F <<'EOF'` or `printf '...' > F`."""
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


def _run_all(texts: list[str | tuple[str, int]], run_cli: RunCli, cwd: Path) -> None:
    """Each command in order; a (text, code) pair expects that exit code instead of 0."""
    for item in texts:
        text, expected = item if isinstance(item, tuple) else (item, 0)
        command = readme_command(text)
        rc, out, err = run_cli(list(command.argv), cwd)
        assert rc == expected, f"{command.page}:{command.line}: `{text}` exited {rc}: {out}{err}"


def _run_group(texts: list[str | tuple[str, int]], run_cli: RunCli, tmp_path: Path) -> None:
    for text in PAGES.values():
        for name, content in readme_files(text).items():
            (tmp_path / name).write_text(content, encoding="utf-8")
    _run_all(texts, run_cli, tmp_path)


@pytest.mark.integration
@pytest.mark.parametrize("group", RUNNABLE)
def test_safe_readme_commands_run(group: str, run_cli: RunCli, tmp_path: Path) -> None:
    _run_group(RUNNABLE[group], run_cli, tmp_path)
    if group in ("cheat sheet", "templates", "ddp"):
        assert (tmp_path / "train.py").is_file()
    if group == "doctor record and replay":
        assert (tmp_path / "bug-1234" / "host.json").is_file()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("group", RUNNABLE_SLOW)
def test_safe_slow_doc_commands_run(group: str, run_cli: RunCli, tmp_path: Path) -> None:
    _run_group(RUNNABLE_SLOW[group], run_cli, tmp_path)
    (manifest,) = tmp_path.glob("runs/*/manifest.json")
    assert '"exit_code": 0' in manifest.read_text()


@pytest.mark.integration
def test_readme_create_and_export_run(fixtures: Path, run_cli: RunCli, tmp_path: Path) -> None:
    """The create example solves against the local fixture channel it names; export reads its
    lock. Its --dir goes to tmp (the guide writes /tmp/proj); its ../shared/fixtures is the
    fixture."""
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
    assert rc == 0, f"{create.page}:{create.line}: exited {rc}: {out}{err}"
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
