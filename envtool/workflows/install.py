"""Installing from a lock, the steps `install` (NAME, --lock, --from) and `create` share: the
plan from one read of the lock with the one host check (plan_from_lock; --force skips the
check), and the mutexes every install holds, in their one order (hold_install_mutexes), with an
interrupted removal finished first. The command applies the plan (adapters/install/installer)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from envtool.core.shell_quote import quote_posix
from envtool.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from envtool.core.install_plan import InstallPlan
    from envtool.core.lockfile import Lock


def check_host(meta: dict[str, str], platform: str) -> None:
    """Probe the host; a driver or GPU that cannot run the locked build is a UsageError — the
    same line for create, install NAME, --lock and --from (each skips it with --force)."""
    from envtool.adapters.host.host_probe import probe_host
    from envtool.core.host_check import host_refusal

    refusal = host_refusal(meta, platform, probe_host())
    if refusal is not None:
        raise refusal


def _refuse_replacing(name: str, target: Path, lock_sha256: str, from_dir: str) -> None:
    """A bundle names its env; that name must not silently replace an env already there (one
    installed from this very lock is only converged: nothing of it is replaced). Called with
    the env mutex held and the plan's one read of the lock: a create cannot slip in between."""
    from envtool.adapters.install.install_state import read_state_record

    if not (target.exists() or target.is_symlink()):
        return
    record = read_state_record(target) or {}
    if record.get("lock_sha256") and record.get("lock_sha256") == lock_sha256:
        return
    raise UsageError(
        f"--from {from_dir}: the bundle installs as {name!r}, and {target} already holds "
        "another environment; nothing was changed",
        f"name the env to install into: `envtool install NAME --from {quote_posix(str(from_dir))}` "
        f"(`envtool install {quote_posix(name)} --from {quote_posix(str(from_dir))}` replaces it)",
    )


@contextlib.contextmanager
def hold_install_mutexes(lock_path: Path, target: Path, label: str) -> Iterator[None]:
    """What every install into an env holds (`install NAME`, `--lock`, `--from` a bundle): the
    project mutex of the lockfile's folder (so `lock`/`create` cannot rewrite it mid-install),
    then the env mutex (so `remove` or another install cannot run at the same time) — that
    order, always.
    Once held, an interrupted removal of the env is finished first."""
    from envtool.adapters.mutex import hold_env_mutex, hold_project_mutex
    from envtool.output import note
    from envtool.workflows.remove import finish_interrupted_removal

    with hold_project_mutex(lock_path.absolute().parent, label):
        with hold_env_mutex(target, label, on_wait=note):
            finish_interrupted_removal(target, label)
            yield


def plan_from_lock(
    lock_path: Path,
    target: Path,
    override: list[str],
    offline: bool,
    platform: str | None,
    force: bool,
    variant: dict[str, str] | None = None,
    replacing: tuple[str, str] | None = None,
    follow_symlinks: bool = True,
    lock: Lock | None = None,
) -> InstallPlan:
    """The install as data (core/install_plan), from one read of the lock: its platform's
    packages and URLs, what the caches hold, the host check's verdict (a refusal is raised:
    there is no plan then; --force skips it), the variant chosen. --dry-run prints it;
    apply_plan executes it. `replacing` (the bundle's env name, --from DIR): refused when that
    env holds another lock's install. `follow_symlinks=False`: the lock is a bundle's (a link
    there is refused). `lock`: already read (a pixi.lock's environment × platform, converted
    by adapters/lockfile/pixi_lock), not read again from `lock_path`."""
    from envtool.adapters.install import installer
    from envtool.adapters.locate import current_platform
    from envtool.adapters.lockfile.lock_io import read_lock

    if lock is None:
        lock = read_lock(lock_path, follow_symlinks=follow_symlinks)
    if replacing is not None:
        _refuse_replacing(replacing[0], target, lock.sha256, replacing[1])
    from envtool.adapters.config import offline_mode

    plat = platform or current_platform()
    if not force:
        check_host(lock.custom_metadata, plat)
    plan = installer.plan_install(
        lock,
        target,
        plat,
        override or None,
        None,  # the default caches, envtool's and rattler's shared one, as the install uses
        offline,
        host_check="skipped (--force)" if force else "ok",
        variant=variant,
    )
    if offline_mode():  # --offline / ENVTOOL_OFFLINE / offline = true: the package cache only
        from envtool.core.config import network_packages

        if missing := network_packages(plan):
            shown = ", ".join(missing[:5]) + (
                f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            )
            raise UsageError(
                f"offline: {len(missing)} package(s) are not in the package cache ({shown})",
                "install once online (or from `envtool bundle`'s --from DIR), or drop --offline",
            )
    return plan
