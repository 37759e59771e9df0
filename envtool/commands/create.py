"""`envtool create NAME`: plan, solve, verify, lock (and install) a CUDA-matched environment.

Writes environments/NAME/environment.yml (the request) and environments/NAME/conda-lock.yml
(the answer) under the current directory or --dir. The locking itself is workflows/lock.py.
"""

from __future__ import annotations

from pathlib import Path

import click

from envtool.commands import (
    adopt_confirmed,
    create_yes_option,
    env_name,
    gpus_mistake_option,
    project_dir_option,
    renders,
)
from envtool.core.plan import PLATFORMS
from envtool.errors import UsageError
from envtool.output import Result
from envtool.workflows.lock import lock_environment, request_from_yml
from envtool.workflows.lock_outcome import summarize_lock


@click.command("create")
@env_name
@click.option(
    "--cuda",
    default=None,
    help="X.Y, a major X (newest X.* that runs), auto (default: what this host runs) or cpu.",
)
@click.option("--torch", "torch_version", default=None, help="PyTorch version, e.g. 2.7.")
@click.option("--python", "python_version", default=None, help="Python version, e.g. 3.11.")
@click.option(
    "-f",
    "--file",
    "file_",
    type=click.Path(dir_okay=False),
    help="Start from an existing environment.yml.",
)
@click.option(
    "--profile", default=None, help="A shipped profile: pytorch (default), ddp, lm, fsdp."
)
@click.option(
    "--flavor",
    type=click.Choice(["conda-forge", "pytorch"]),
    default=None,
    help="conda-forge (default) or the legacy pytorch channel (torch ≤ 2.5).",
)
@click.option(
    "--platform",
    "platforms",
    multiple=True,
    type=click.Choice(list(PLATFORMS)),
    help="Target platform (repeatable; default: the environment file's platforms:, else this host's).",
)
@click.option(
    "-c",
    "--channel",
    "channels",
    multiple=True,
    help="Channel name, URL or local folder (repeatable, in priority order).",
)
@click.option("--driver", default=None, help="Plan for a machine with this NVIDIA driver version.")
@gpus_mistake_option
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    help="Plan for a GPU of this compute capability (8.0 or sm_80; repeatable).",
)
@click.option(
    "--virtual-package",
    "virtual",
    multiple=True,
    hidden=True,
    help="Override a virtual package: __glibc=2.17.",
)
@project_dir_option
@click.option(
    "-p",
    "--prefix",
    default=None,
    help="Install prefix (default: <envs dir>/NAME: conda's envs/ when conda is installed, "
    "else ~/.local/share/envtool/envs).",
)
@click.option("--no-install", is_flag=True, help="Solve and lock only.")
@click.option(
    "--force",
    is_flag=True,
    help="Install even if this host's driver/GPUs can't run the build (as install --force).",
)
@create_yes_option
@click.option("--dry-run", is_flag=True, help="Print the plan and solution summary; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@click.option("--quiet", "-q", is_flag=True, help="No install progress lines.")
@renders
def cmd(
    name: str | None,
    cuda: str | None,
    torch_version: str | None,
    python_version: str | None,
    file_: str | None,
    profile: str | None,
    flavor: str | None,
    platforms: tuple[str, ...],
    channels: tuple[str, ...],
    driver: str | None,
    gpus: tuple[str, ...],
    virtual: tuple[str, ...],
    directory: str | None,
    prefix: str | None,
    no_install: bool,
    dry_run: bool,
    as_json: bool,
    force: bool = False,
    quiet: bool = False,
    yes: bool = False,
) -> Result:
    """Plan, solve, verify and lock environments/NAME (then install it, unless --no-install)."""
    if file_ and profile:
        raise UsageError("give -f FILE or --profile, not both", "pick one starting point")
    if name is None and not file_:
        raise UsageError("no environment NAME given", "pass NAME (or -n NAME)")
    if file_:
        from envtool.adapters.files import ENV_FILE_LIMIT, read_text

        try:
            text, source = read_text(file_, ENV_FILE_LIMIT, what="environment file"), file_
        except UsageError as exc:  # name the flag the path came from
            if exc.message.startswith(f"{file_}:"):
                exc.message = f"-f {exc.message}"
            raise
        if name is None:  # conda env create -f: the file's `name:`
            from envtool.core.spec import parse_environment_yml

            name = parse_environment_yml(text, source).name
            if not name:
                raise UsageError(
                    f"-f {file_} has no `name:` and no NAME was given", "pass NAME (or -n NAME)"
                )
    from envtool.adapters.shipped.profiles import DEFAULT_PROFILE, read_profile

    if not file_:
        text, source = read_profile(profile or DEFAULT_PROFILE)
    from envtool.adapters.locate import written_channel
    from envtool.core.request import parse_virtual_overrides

    flags = {
        "cuda": cuda,
        "torch": torch_version,
        "python": python_version,
        "flavor": flavor,
        "platforms": list(platforms),
        "channels": [written_channel(c, directory) for c in channels],
        "driver": driver,
        "gpus": list(gpus),
        "virtual_overrides": parse_virtual_overrides(virtual),
    }

    file_dir = Path(file_).absolute().parent if file_ else None
    request = request_from_yml(text, source, flags, file_dir=file_dir, directory=directory)
    if dry_run:
        outcome = lock_environment(name, text, source, request, directory, dry_run=True)
        return summarize_lock(outcome, name, "create", True)
    from contextlib import ExitStack

    from envtool.adapters.locate import env_prefix, project_env_paths
    from envtool.adapters.mutex import hold_env_mutex, hold_project_mutex
    from envtool.output import note

    target = None if no_install else env_prefix(name, prefix)
    _refuse_unwritable(project_env_paths(name, directory)[0])
    if not yes:
        asked = f"-f {file_}" if file_ else f"profile {profile or DEFAULT_PROFILE}"
        refuse_lost_work(name, directory, target, (text, source, asked))
    # asked before the solve and any mutex: a "no" costs nothing (no solve, nothing written)
    adopt = target is not None and adopt_confirmed(target, yes)
    with ExitStack() as held:
        # One create at a time per environment: the lock written and the env installed from it
        # agree (two creates racing left a 6-package lock beside an 806-package env). The
        # project mutex first, then the env's: every command takes them in that order.
        held.enter_context(hold_project_mutex(project_env_paths(name, directory)[0], name))
        if target is not None:
            held.enter_context(hold_env_mutex(target, name, on_wait=note))
        outcome = lock_environment(name, text, source, request, directory)
        result = summarize_lock(outcome, name, "create", False)
        if target is not None:
            from envtool.adapters.install.installer import apply_install
            from envtool.workflows.install import plan_from_lock
            from envtool.workflows.remove import finish_interrupted_removal

            lock_path = outcome.env_dir / "conda-lock.yml"
            try:  # install's plan: its host check, its line and its --force (one rule)
                plan = plan_from_lock(lock_path, target, [], False, None, force)
            except UsageError:
                if not force:
                    note(f"locked {lock_path}; not installed")
                raise
            finish_interrupted_removal(target, name)
            report = apply_install(plan, progress=not (as_json or quiet), force=force, adopt=adopt)
            result.data["install"] = report.to_dict()
            result.text.append(f"installed {name} into {target}")
    return result


def refuse_lost_work(
    name: str, directory: str | None, target: Path | None, request: tuple[str, str, str]
) -> None:
    """What create would destroy, refused before the solve (--yes replaces it): an
    environments/NAME/environment.yml edited since it was locked (the lock records the sha256
    of the file it was solved from; a file with no lock is someone's own), one whose packages
    the new request (`request`: its text, source and how it was asked for) would drop — asked
    at a terminal, as conda create asks before replacing an env — and an installed NAME that
    another project's lock made (env names are global, like conda's; projects are not). A
    locked file whose packages the request keeps is replaced (new pins, another CUDA), and
    create says so."""
    from envtool.adapters.files import LOCK_FILE_LIMIT, read_text_or_none
    from envtool.adapters.install.install_state import read_state_record
    from envtool.adapters.locate import project_env_paths
    from envtool.core.lockfile import parse_lock_file_sha256, request_file_sha256
    from envtool.core.shell_quote import quote_posix

    env_dir, yml_path, lock_path = project_env_paths(name, directory)
    old = read_text_or_none(yml_path)
    if old is not None:
        # conda-lock.yml, or a variant's conda-lock.<variant>.yml (`lock --variants`)
        locks = [p for p in [lock_path, *sorted(env_dir.glob("conda-lock.*.yml"))] if p.is_file()]
        texts = [read_text_or_none(p, LOCK_FILE_LIMIT) or "" for p in locks]
        recorded = {parse_lock_file_sha256(t) for t in texts} - {None}
        if not locks:
            raise UsageError(
                f"{yml_path} exists and no lock was made from it; create would replace it with "
                "the request its flags make",
                f"lock it as it is: `envtool lock {quote_posix(name)}`; replace it: add --yes",
            )
        if recorded:
            edited = request_file_sha256(old) not in recorded
        else:  # a lock from before the file's sha256 was recorded: its input hash says
            from envtool.workflows.lock_fresh import lock_freshness

            edited = not lock_freshness(old, lock_path, env_dir).fresh
        if edited:
            raise UsageError(
                f"{yml_path} was edited since it was locked; create would replace it with the "
                "request its flags make",
                f"keep it: `envtool lock {quote_posix(name)}` locks it as it is; replace it: add "
                "--yes",
            )
        _refuse_dropping(name, directory, yml_path, old, request)
    installed_from = (read_state_record(target) or {}).get("lock_path") if target else None
    if isinstance(installed_from, str) and Path(installed_from).is_file():
        if not Path(installed_from).resolve().is_relative_to(env_dir.resolve()):
            raise UsageError(
                f"{name} ({target}) is installed from {installed_from}, not from this "
                f"project's environments/{name}; create would replace that environment",
                "pick another name here, or add --yes to replace it",
            )


def _refuse_dropping(
    name: str, directory: str | None, yml_path: Path, old: str, request: tuple[str, str, str]
) -> None:
    """The packages of a locked environments/NAME/environment.yml that create's request would
    drop (`create NAME` again without -f: the default profile): asked, else refused."""
    from envtool.commands import confirmed
    from envtool.core.request import dropped_packages
    from envtool.core.shell_quote import printable, quote_posix
    from envtool.core.spec import parse_environment_yml

    try:
        before = parse_environment_yml(old, str(yml_path))
    except UsageError:  # a broken file holds no packages to keep; the lock's check says the rest
        return
    text, source, asked = request
    lost = dropped_packages(before, parse_environment_yml(text, source))
    if not lost:
        return
    what = ", ".join(lost[:6]) + (f" and {len(lost) - 6} more" if len(lost) > 6 else "")
    if confirmed(
        printable(
            f"{yml_path} asks for {what}, which create's request ({asked}) drops; replace it?"
        )
    ):
        return
    keep = f"envtool create {quote_posix(name)} -f {quote_posix(str(yml_path))}"
    if directory:
        keep += f" --dir {quote_posix(directory)}"
    them = "them" if len(lost) > 1 else "it"
    raise UsageError(
        f"{yml_path} asks for {what}; create's request ({asked}) would drop {them}",
        f"keep {them}: `{keep}` starts from that file (your flags still apply); replace it: "
        "add --yes",
    )


def _refuse_unwritable(env_dir: Path) -> None:
    """A project folder create cannot write (read-only, another user's): said before the solve,
    not after it (the lock would be solved, then lost)."""
    import os

    from envtool.core.shell_quote import printable

    probe = env_dir
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if probe.is_dir() and not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write {printable(str(env_dir))}: {printable(str(probe.absolute()))} is not "
            "writable",
            "run create in a project folder you can write (or pass --dir DIR)",
        )
