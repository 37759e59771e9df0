"""Install a conda-lock.yml (v1) into a prefix with py-rattler: no conda executable needed.

Order of work, chosen so nothing is ever half-done or unverified:
  1. read the lock once (lock_io.read_lock, the one reader) and plan (plan_install: the
     platform's packages, their URLs, what the caches hold — core/install_plan.InstallPlan,
     what `install --dry-run` prints); apply_install executes that plan, steps 2–6;
  2. take the env mutex (adapters/mutex.py); check the prefix's package records; fetch (step 3);
     then write the `incomplete` marker;
  3. fetch every archive into envtool's archive cache, checked against the lock while it
     streams (fetch.py), or use a package rattler's shared cache already holds intact; then
     validate each archive in Python: structure, its own index.json names the locked package,
     paths.json stays in the prefix (archive_check.py);
  4. link them with rattler from the verified copies (link.py): rattler never downloads
     anything itself, writes conda-meta, removes packages the lock no longer has, converges;
  5. install the lock's `manager: pip` entries with uv (uv_pip.install_pip:
     `--require-hashes --no-deps`);
  6. write conda-meta/envtool/state.json, then drop the marker.

Everything that can refuse an install (prefix records, hashes, archive validity, relabelled
archives) runs before step 2's marker, so a refused install leaves a healthy env healthy.
`_pause_hook` is a no-op seam that tests replace to kill an install at a known point.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from envtool.adapters import mutex
from envtool.adapters.install import install_state
from envtool.adapters.install.archive_check import extracted_entry, read_archive_contents
from envtool.adapters.install.fetch import (
    InstallReport,
    fetch_all,
    is_own_file,
    remap_to_channels,
)
from envtool.adapters.install.installed import check_prefix_records, set_aside_records
from envtool.adapters.install.link import link_packages, restore_locked_urls
from envtool.adapters.install.progress import Progress
from envtool.adapters.install.uv_pip import install_pip
from envtool.adapters.locate import current_platform, default_cache_dir
from envtool.adapters.lockfile.lock_io import read_lock
from envtool.core.install_plan import (
    FETCH,
    PACKAGE_CACHE,
    PIP,
    REUSE,
    InstallPlan,
    PlannedPackage,
)
from envtool.core.lockfile import Lock, LockedPackage
from envtool.errors import Interrupted, UsageError
from envtool.output import note


def rattler_package_cache(cache: Path) -> Path:
    """Where rattler keeps extracted packages, which it hardlinks into prefixes.

    With ENVTOOL_CACHE_DIR set: envtool's own (CACHE/rattler, isolated). Otherwise rattler's
    shared package cache — the one pixi and rattler-build use (RATTLER_CACHE_DIR, else
    $XDG_CACHE_HOME or ~/.cache, + rattler/cache; packages under pkgs/) — so a package already
    extracted on this machine is linked, not downloaded and extracted again. Every entry rattler
    would link from is still checked against the lock-verified archive (verify_extracted)."""
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return cache / "rattler"
    from envtool.adapters.solve.network import rattler_cache_root

    return rattler_cache_root() / "pkgs"


def _install_hint(lock: Lock, platform: str) -> str:
    """The fix for a platform the lock lacks: a platform envtool locks for (re-lock for it), a
    near miss of one the lock has (`linux64`), else the lock's own platforms."""
    import difflib

    from envtool.core.plan import PLATFORMS
    from envtool.core.shell_quote import printable

    if platform in PLATFORMS:
        return f"re-lock with `--platform {platform}` or install on a {lock.platforms[0]} host"
    if platform in _conda_platforms():  # real, but not one envtool locks for (linux-ppc64le)
        return f"install on a host of one of: {', '.join(lock.platforms)}"
    close = difflib.get_close_matches(platform, lock.platforms, n=1, cutoff=0.75)
    if close:
        return f"did you mean --platform {close[0]}?"
    return f"{printable(platform)!r} is not a platform: pick one of {', '.join(lock.platforms)}"


def _conda_platforms() -> set[str]:
    """Every platform conda knows (rattler's list), linux-ppc64le and win-arm64 among them."""
    from rattler import Subdir

    return {str(p) for p in Subdir.all()}


def plan_install(
    lock: Lock,
    prefix: Path | str,
    platform: str,
    channels_override: list[str] | None,
    cache_dir: Path | str | None = None,
    offline: bool = False,
    host_check: str = "ok",
    variant: dict[str, str] | None = None,
) -> InstallPlan:
    """The install of `lock` (read once, by the caller) into `prefix`, as data: what --dry-run
    prints and what apply_install executes. Reads only: no file is written, no archive hashed
    (apply checks every cached copy again). `host_check`: the caller's verdict (a refusal is
    raised before there is a plan); `variant`: the variant lock chosen, and why."""
    lock.require_platform(platform, _install_hint(lock, platform))
    pkgs = lock.hashed_for_platform(platform)
    prefix = Path(prefix).expanduser().absolute()
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    extracted = cache / "rattler" if cache_dir else rattler_package_cache(cache)
    archive_dir = cache / "archives"

    def source(p: LockedPackage) -> str:
        if p.manager != "conda":
            return PIP
        if is_own_file(archive_dir / p.file_name):
            return REUSE
        try:  # apply checks it file by file (read_extracted_contents) before using it
            in_package_cache = extracted_entry(extracted, p).is_dir()
        except OSError:
            in_package_cache = False
        return PACKAGE_CACHE if in_package_cache else FETCH

    planned = tuple(
        PlannedPackage(
            p,
            remap_to_channels(p, channels_override, offline) if channels_override else p.url,
            source(p),
        )
        for p in pkgs
    )
    return InstallPlan(
        prefix=str(prefix),
        prefix_exists=prefix.exists(),
        install_state=install_state.read_install_state(prefix) if prefix.exists() else None,
        lock_path=str(lock.path),
        lock_sha256=lock.sha256,
        lock_metadata=dict(lock.custom_metadata),
        platform=platform,
        packages=planned,
        cache_dir=str(cache),
        package_cache=str(extracted),
        offline=offline,
        host_check=host_check,
        variant=variant,
    )


def install_from_lock(
    lock_path: Path | str,
    prefix: Path | str,
    platform: str | None = None,
    channels_override: list[str] | None = None,
    cache_dir: Path | str | None = None,
    progress: bool = True,
    force: bool = False,
    offline: bool = False,
) -> InstallReport:
    """Install a conda-lock.yml into prefix; converge if the prefix exists or was interrupted:
    read the lock once, plan_install, apply_install (`envtool install` does the same steps
    itself, to show the plan with --dry-run and to record the host check it made).

    `force` is for callers that already decided to skip host checks; the install itself always
    verifies hashes. `channels_override` remaps every URL to the same file in those channels;
    `offline` (a bundle): a file missing there is an error, never fetched from the lock's URL.
    """
    lock = read_lock(Path(lock_path))
    platform = platform or current_platform()
    plan = plan_install(lock, prefix, platform, channels_override, cache_dir, offline)
    return apply_install(plan, progress=progress, force=force)


def apply_install(
    plan: InstallPlan, progress: bool = True, force: bool = False, adopt: bool = False
) -> InstallReport:
    """Execute `plan`: exactly its packages, from its URLs, for its platform, into its prefix,
    with its caches; the state records its lock's sha256 and metadata. Nothing is planned
    again and the lock is not read again; every archive is still checked against the lock's
    hashes (a cached copy the plan counted on that fails is fetched again). `force`: recorded
    in the env's state (the caller skipped the host check). `adopt`: the user agreed to replace
    an environment envtool did not install (conda's, pixi's); without it that is refused."""
    started = time.monotonic()
    prefix = Path(plan.prefix)
    lock_path = Path(plan.lock_path)
    from envtool.adapters.locate import looks_like_env

    if prefix.exists() and any(prefix.iterdir()) and not looks_like_env(prefix):
        raise UsageError(
            f"{prefix} exists and is not a conda environment (no conda-meta/)",
            "install into a new or empty directory, or an existing environment",
        )
    if not adopt:
        install_state.refuse_foreign_env(prefix)
    cache = Path(plan.cache_dir)
    extracted = Path(plan.package_cache)
    shown = Progress(quiet=not progress)
    say: Callable[[str], None] = shown.say
    # the plan's packages were checked when it was made: nothing to undo before the marker
    conda_pkgs = [p.package for p in plan.conda]
    pip_pkgs = [p.package for p in plan.pip]
    report = InstallReport(str(prefix), plan.lock_path, plan.lock_sha256, plan.platform)

    urls = {p.package.file_name: p.url for p in plan.packages}
    if pip_pkgs:  # a bad pip entry is refused before anything is fetched or linked
        from envtool.core.pip_lock import pip_requirements

        pip_requirements(pip_pkgs, urls, plan.lock_path)
    with mutex.hold_env_mutex(prefix, prefix.name, on_wait=note):
        # Everything that can refuse the install runs before the prefix is touched: a refused
        # install leaves a healthy env healthy (no marker) and the archive cache as it was.
        damaged_records = check_prefix_records(prefix) if prefix.is_dir() else []
        # every downloaded or cached archive validated before linking: by fetch_all, in the
        # pass that checks its hash (cached) or right after its download
        marked = False  # Ctrl-C: what it left is said by whether the marker is written
        try:
            archives, contents = fetch_all(
                conda_pkgs,
                urls,
                cache / "archives",
                report,
                shown,
                lock_path.name,
                extracted,
                validate=lambda path, pkg, data: read_archive_contents(path, pkg, data),
            )
            for p in conda_pkgs:  # none is left unvalidated, whatever fetch_all did
                if p.file_name not in contents:
                    contents[p.file_name] = read_archive_contents(archives[p.file_name], p)
            marked = True  # before the write: a Ctrl-C inside it may have left the marker
            install_state.write_incomplete_marker(prefix, plan.lock_sha256, lock_path)
            _pause_hook("after-download")
            set_aside_records(prefix, damaged_records, say)
            shown.start_link(len(conda_pkgs), str(prefix))
            try:
                from_local = link_packages(
                    conda_pkgs,
                    archives,
                    contents,
                    prefix,
                    plan.platform,
                    extracted,
                    shown,
                    on_first_link=lambda: _pause_hook("mid-link"),
                )
            finally:
                shown.end_link()
            restore_locked_urls(prefix, [p for p in conda_pkgs if p.file_name in from_local])
            _pause_hook("after-link")
            if pip_pkgs:
                say(f"installing {len(pip_pkgs)} pip packages (--require-hashes --no-deps)")
                install_pip(pip_pkgs, urls, prefix, cache / "uv")
            report.conda_packages = len(conda_pkgs)
            report.pip_packages = len(pip_pkgs)
            report.seconds = round(time.monotonic() - started, 3)
            install_state.write_complete_state(
                prefix,
                {
                    "lock_sha256": plan.lock_sha256,
                    "lock_path": str(lock_path.resolve()),
                    "platform": plan.platform,
                    "plan": plan.lock_metadata,
                    "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "conda_packages": len(conda_pkgs),
                    "pip_packages": len(pip_pkgs),
                    "forced": force,
                },
            )
        except KeyboardInterrupt:
            try:
                shown.close()
            except KeyboardInterrupt:  # a second Ctrl-C: still say what was left
                pass
            raise _interrupted(prefix, marked) from None
    pip_part = f", {len(pip_pkgs)} pip package{'s' * (len(pip_pkgs) != 1)}" if pip_pkgs else ""
    say(f"{shown.summary()}{pip_part}; {report.seconds:.1f} s in all")
    shown.close()
    return report


def _interrupted(prefix: Path, marked: bool) -> Interrupted:
    """What Ctrl-C left: before the marker nothing in the prefix changed (and finished downloads
    stay cached); after it the prefix is marked incomplete until the same install finishes."""
    if not marked:
        return Interrupted(
            f"interrupted before anything was installed into {prefix}",
            "finished downloads stay in the cache: run the same command to go on",
        )
    from envtool.adapters.install.installed import describe_env, finish_command

    return Interrupted(
        f"interrupted while installing: {prefix} is marked incomplete",
        f"`{finish_command(describe_env(prefix))}` finishes it",  # what info and doctor say
    )


def _pause_hook(point: str) -> None:
    """A seam for tests, and a no-op: tests that must kill an install at a known point
    (after-download, mid-link, after-link) replace this function in a child process
    (tests/channel_builder.run_paused). No environment variable or flag reaches it."""
