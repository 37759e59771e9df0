"""`envtool install NAME | --lock FILE`: install an environment from its conda-lock.yml."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from envtool.commands import adopt_confirmed, env_name, renders, yes_option
from envtool.core.shell_quote import quote_posix
from envtool.errors import UsageError
from envtool.output import Result
from envtool.workflows.install import hold_install_mutexes, plan_from_lock

if TYPE_CHECKING:
    from envtool.core.install_plan import InstallPlan


def resolve_install_args(
    name: str | None,
    lock_file: str | None,
    prefix: str | None,
    from_dir: str | None,
    channels: tuple[str, ...],
) -> tuple[Path, Path, list[str], str, str | None]:
    """(lock path, prefix, channel overrides, label, the bundle's recorded name when it names the
    env) from the flags; UsageError when ambiguous."""
    from envtool.adapters.locate import env_prefix, project_lock_path

    override = [str(Path(c).expanduser().resolve()) if "://" not in c else c for c in channels]
    recorded = None
    if from_dir:
        bundle = Path(from_dir).expanduser()
        if not (bundle / "conda-lock.yml").is_file():
            raise UsageError(
                f"--from {from_dir}: no conda-lock.yml there",
                "pass a directory written by `envtool bundle NAME -o DIR`",
            )
        lock = Path(lock_file) if lock_file else bundle / "conda-lock.yml"
        override.append(str((bundle / "channel").resolve()))
        if not name and not prefix:  # the name `envtool bundle NAME` recorded, not DIR's
            from envtool.adapters.install.bundle import read_bundle_name

            recorded = read_bundle_name(bundle)
            name = recorded
    elif lock_file:
        lock = Path(lock_file)
    elif name:
        lock = project_lock_path(name)
        if not lock.is_file():
            raise UsageError(
                f"no lock for {name!r} at {lock}",
                f"run `envtool create {quote_posix(name)}` / `envtool lock {quote_posix(name)}` here, "
                "or pass --lock FILE",
            )
    else:
        raise UsageError("give NAME, --lock FILE or --from DIR", "e.g. `envtool install myenv`")
    label = name or (Path(prefix).name if prefix else lock.resolve().parent.name)
    target = env_prefix(label, prefix)
    return lock, target, override, label, recorded


@click.command("install")
@env_name
@click.option(
    "--lock",
    "lock_file",
    help="Install this conda-lock.yml (default: environments/NAME/conda-lock.yml).",
)
@click.option("-p", "--prefix", help="Install into this directory instead of <envs dir>/NAME.")
@click.option("--from", "from_dir", help="Offline: a directory written by `envtool bundle`.")
@click.option(
    "-c",
    "--channel",
    "channels",
    multiple=True,
    help="Local channel dir holding the locked files (repeatable).",
)
@click.option("--platform", help="Platform to install (default: this host's).")
@click.option(
    "--force", is_flag=True, help="Install even if this host's driver/GPUs can't run the build."
)
@click.option(
    "--dry-run", is_flag=True, help="Show what would be fetched and linked; change nothing."
)
@click.option(
    "--variant",
    help="Install this variant of NAME's variant locks (cpu, cuda12.6, …) instead of the one "
    "this host would pick (still host-checked unless --force).",
)
@click.option(
    "--environment",
    "pixi_env",
    help="With --lock pixi.lock: the pixi environment to install (default: `default`).",
)
@yes_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope; no progress.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines (errors are still printed).")
@renders
def cmd(
    name: str | None,
    lock_file: str | None,
    prefix: str | None,
    from_dir: str | None,
    channels: tuple[str, ...],
    platform: str | None,
    force: bool,
    dry_run: bool,
    as_json: bool,
    variant: str | None = None,
    quiet: bool = False,
    pixi_env: str | None = None,
    yes: bool = False,
) -> Result:
    """Install an environment from its lock: hash-verified, resumable, offline-capable."""
    if variant is not None and (lock_file or not (name or from_dir)):
        raise UsageError(
            "--variant picks among variant locks", "give NAME or --from DIR, without --lock"
        )
    choice = None  # the variant an index chose (and why), for --json as for the note
    # the lock a bundle carries (its conda-lock.yml or a variant's) is read without following a
    # symlink, like its bundle.json: a link could point the install anywhere
    bundle_lock = from_dir is not None and lock_file is None
    if not lock_file and (name or from_dir):  # variant locks: the one this host runs
        from envtool.adapters.lockfile.variant_lock import (
            choose_bundle_variant,
            choose_project_variant,
        )
        from envtool.output import note

        picked = (
            choose_bundle_variant(Path(from_dir), variant, platform, force)
            if from_dir
            else choose_project_variant(str(name), variant, platform, force)
        )
        if picked is not None:
            lock_file = str(picked[0])
            choice = picked[1]
            note(f"variant {choice.variant.name}: {choice.reason}")
    lock_path, target, override, label, recorded = resolve_install_args(
        name, lock_file, prefix, from_dir, channels
    )
    # the env the bundle names must not be replaced; checked on the plan's read of the lock
    replacing = None if recorded is None or from_dir is None else (recorded, from_dir)
    picked_variant = None
    if choice is not None:
        picked_variant = {
            "variant": choice.variant.name,
            "mode": choice.mode,
            "reason": choice.reason,
        }
    offline = from_dir is not None  # a bundle: a file missing from it is never downloaded
    pixi_lock = read_pixi_target(lock_file, pixi_env, platform)

    def plan() -> InstallPlan:  # one read of the lock, the same for --dry-run and the install
        return plan_from_lock(
            lock_path,
            target,
            override,
            offline,
            platform,
            force,
            picked_variant,
            replacing,
            follow_symlinks=not bundle_lock,
            lock=pixi_lock,
        )

    if dry_run:  # reads only: no lock to wait for
        from envtool.adapters.install.download_size import probe_download_sizes
        from envtool.core.install_plan import plan_download, render_download

        planned = plan()
        download = plan_download(planned, probe_download_sizes(planned))
        data = {"dry_run": True, "name": label, **planned.to_dict(), "download": download}
        return Result("install", data, [*planned.render(), render_download(download)])
    adopt = adopt_confirmed(target, yes)  # asked before any mutex is held
    with hold_install_mutexes(lock_path, target, label):
        # the lock is read (once) with its project folder held: what is planned is what runs
        planned = plan()
        result = apply_plan(planned, label, not (as_json or quiet), force, adopt)
    return result


def read_pixi_target(lock_file: str | None, environment: str | None, platform: str | None):
    """With --lock pixi.lock: its --environment × platform as envtool's lock model (the same
    install path, host check and verification as a conda-lock); None for a conda-lock."""
    if lock_file is None or not Path(lock_file).is_file():
        if environment is not None:
            raise UsageError("--environment picks a pixi.lock environment", "pass --lock pixi.lock")
        return None
    from envtool.adapters.lockfile.pixi_lock import looks_like_pixi_lock, read_pixi_lock

    if not looks_like_pixi_lock(Path(lock_file)):
        if environment is not None:
            raise UsageError(
                f"--environment {environment}: {lock_file} is not a pixi.lock",
                "drop --environment for a conda-lock.yml",
            )
        return None
    from envtool.adapters.locate import current_platform

    return read_pixi_lock(lock_file).as_lock(
        environment or "default", platform or current_platform()
    )


def apply_plan(
    plan: InstallPlan, label: str, progress: bool, force: bool, adopt: bool = False
) -> Result:
    """Execute `plan` (the caller holds the mutexes: hold_install_mutexes) and report it."""
    from envtool.adapters.install.installer import apply_install

    report = apply_install(plan, progress=progress, force=force, adopt=adopt)
    text = [
        f"installed {label} at {plan.prefix} ({report.conda_packages} conda, "
        f"{report.pip_packages} pip)"
    ]
    data = {"name": label, **report.to_dict()}
    if plan.variant is not None:
        data["variant"] = plan.variant
    return Result("install", data, text)
