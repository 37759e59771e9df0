"""`envtool lock NAME --variants LIST|auto`: one standard conda-lock v1 file per variant
(environments/NAME/conda-lock.<variant>.yml) plus the index (variants.yml) install chooses from.

Each variant goes through the one lock workflow (`workflows/lock.lock_environment`: plan at the
variant's CUDA or CPU, solve with rattler, verify — no CPU build inside a CUDA variant, one CUDA
version per variant — then conda-lock's writer). Variants are for other machines, so this host's
driver and GPUs play no part. Every variant is pinned to one torch release when the channel has
one with builds for all of them (else each takes its newest, and the summary says so).

All or nothing: the variants are written into a private staging folder, and only when every one
of them solved and verified are they moved beside environment.yml and the index written. A re-lock
whose inputs did not change (each variant's input hash, as for `envtool lock`) solves nothing and
imports neither rattler nor conda-lock.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envtool import __version__
from envtool.adapters.locate import project_env_paths, project_root
from envtool.adapters.lockfile.variant_lock import index_path, index_problems, read_index
from envtool.core.variants import (
    CPU,
    VariantIndex,
    decide_variants,
    lock_file_name,
    variant_cuda,
    variant_sort_key,
)
from envtool.errors import DiagnosedFailure, EnvtoolError, UsageError
from envtool.output import note


@dataclass
class VariantOutcome:
    name: str
    lock: Path
    state: str  # fresh | written | dry-run
    plan_text: list[str] = field(default_factory=list)
    packages: dict[str, int] = field(default_factory=dict)
    diff: Any = None  # core.lock_diff.LockDiff against the variant's lock on disk (solved only)


@dataclass
class VariantsOutcome:
    name: str
    env_dir: Path
    requested: tuple[str, ...]
    torch: str | None
    variants: list[VariantOutcome]
    index: VariantIndex | None
    changed: bool
    written: bool
    notes: list[str] = field(default_factory=list)


def variant_fresh(lock_path: Path, yml_text: str, cuda: str | None, torch: str | None) -> bool:
    """The variant lock at `lock_path` was solved from this environment.yml, for this CUDA and
    torch pin, over channels that did not change (the input hash `envtool lock` compares)."""
    from envtool.adapters.lockfile.lock_io import stored_lock_options
    from envtool.adapters.solve.rattler_solve import read_channel_identity
    from envtool.core.lockfile import compute_input_hash

    stamp, stored = stored_lock_options(lock_path)
    if stamp is None or stored is None:
        return False
    if stored.get("cuda") != (cuda or CPU) or stored.get("torch") != torch:
        return False
    identity = read_channel_identity(
        list(stored.get("channels") or []),
        list(stored.get("platforms") or []),
        project_root(lock_path.parent),
    )
    return compute_input_hash(yml_text, stored, identity, __version__) == stamp


def stale_variants(env_dir: Path, yml_text: str, index: VariantIndex) -> list[str]:
    """Why the variant locks are not what `lock --variants` would write now: one line each."""
    problems = index_problems(env_dir, index)
    for v in index.variants:
        path = env_dir / v.lock
        if path.is_file() and not variant_fresh(path, yml_text, v.cuda, _stored_torch(path)):
            problems.append(f"{path}: stale")
    return problems


def _as_indexed(env_dir: Path, index: VariantIndex | None, name: str) -> bool:
    """The variant's lock is the file the index recorded (not hand-edited since)."""
    from envtool.adapters.lockfile.variant_lock import file_sha256

    row = index.get(name) if index else None
    path = env_dir / lock_file_name(name)
    return row is not None and path.is_file() and file_sha256(path) == row.sha256


def _stored_torch(lock_path: Path) -> str | None:
    from envtool.adapters.lockfile.lock_io import stored_lock_options

    stored = stored_lock_options(lock_path)[1] or {}
    torch = stored.get("torch")
    return torch if isinstance(torch, str) else None


def lock_variants(
    name: str,
    yml_text: str,
    source: str,
    requested: tuple[str, ...],
    directory: str | None,
    *,
    force: bool = False,
    dry_run: bool = False,
    cache_dir: Path | None = None,
    replaces: str | None = None,
) -> VariantsOutcome:
    """Solve, verify and write every requested variant and the index (see the module docstring).
    `replaces`: the environment.yml on disk that `yml_text` (an edit: add, drop) takes the place
    of, written with the variant locks, under the mutex."""
    env_dir, _, main_lock = project_env_paths(name, directory)
    try:
        old = read_index(env_dir)
    except UsageError as exc:  # a broken index is replaced by this lock, not a reason to stop
        note(f"note: {exc.message}; it will be rewritten")
        old = None
    if (
        not force
        and not dry_run
        and old is not None
        and old.requested == requested
        and not stale_variants(env_dir, yml_text, old)
    ):
        return VariantsOutcome(
            name,
            env_dir,
            requested,
            old.torch,
            [VariantOutcome(v.name, env_dir / v.lock, "fresh") for v in old.variants],
            old,
            False,
            False,
        )
    request, builds = _base_request(name, yml_text, source, env_dir, main_lock, old, cache_dir)
    variants, torch, notes = decide_variants(request, builds, requested)
    if not dry_run:
        _sweep_stale_staging(env_dir)
    staging = None if dry_run else Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=env_dir))
    try:
        results: list[VariantOutcome] = []
        for v in variants:
            lock_name = lock_file_name(v)
            cuda = variant_cuda(v)
            if (
                not force
                and not dry_run
                and _as_indexed(env_dir, old, v)
                and variant_fresh(env_dir / lock_name, yml_text, cuda, torch)
            ):
                results.append(VariantOutcome(v, env_dir / lock_name, "fresh"))
                continue
            results.append(
                _lock_one(
                    name, yml_text, source, request, v, torch, staging, dry_run, cache_dir,
                    env_dir / lock_name,
                )
            )  # fmt: skip
        if dry_run:
            return VariantsOutcome(
                name, env_dir, requested, torch, results, None, True, False, notes
            )
        assert staging is not None
        index = _install_variants(name, env_dir, yml_text, results, requested, torch, old, replaces)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return VariantsOutcome(name, env_dir, requested, torch, results, index, True, True, notes)


STAGING_PREFIX = ".envtool-variants-"
STALE_STAGING_S = 3600  # a staging folder nobody has written for an hour: its run was killed


def _sweep_stale_staging(env_dir: Path) -> None:
    """Staging folders a killed `lock --variants` left (SIGKILL runs no `finally`): removed once
    nobody has written them for an hour — another `lock --variants` may be filling a fresh one.
    Only real folders: a link of that name is left alone, never followed."""
    cutoff = time.time() - STALE_STAGING_S
    for entry in env_dir.glob(STAGING_PREFIX + "*"):
        with contextlib.suppress(OSError):
            st = os.lstat(entry)
            if stat.S_ISDIR(st.st_mode) and st.st_mtime < cutoff:
                shutil.rmtree(entry)


def _base_request(
    name: str,
    yml_text: str,
    source: str,
    env_dir: Path,
    main_lock: Path,
    old: VariantIndex | None,
    cache_dir: Path | None,
) -> tuple[Any, list[Any]]:
    """The request every variant shares (environment.yml + the options the last lock stored, this
    host's driver and GPUs left out) and the torch builds its channels hold."""
    from envtool.adapters.lockfile.lock_io import stored_lock_options
    from envtool.adapters.lockfile.variant_lock import discover_builds
    from envtool.core.plan import DEFAULT_CHANNELS, NO_CUDA_PLATFORMS, check_request
    from envtool.workflows.lock import request_from_yml

    stored = stored_lock_options(main_lock)[1]
    if stored is None and old is not None and old.variants:
        # a variant's own CUDA and torch pin are not the user's request: drop them
        stored = stored_lock_options(env_dir / old.variants[0].lock)[1]
        stored = {k: v for k, v in (stored or {}).items() if k not in ("cuda", "torch")} or None
    request = request_from_yml(yml_text, source, {}, stored)
    request = replace(request, cuda=CPU, driver=None, gpus=())
    check_request(request)  # a bad flavor or platform before any channel is read
    channels = list(request.channels or DEFAULT_CHANNELS[request.flavor])
    platforms = [p for p in request.platforms if p not in NO_CUDA_PLATFORMS] or list(
        request.platforms
    )
    note(f"listing torch builds on {', '.join(channels)} for {', '.join(platforms)} …")
    return request, discover_builds(channels, platforms, cache_dir, project_root(env_dir))


def _lock_one(
    name: str,
    yml_text: str,
    source: str,
    request: Any,
    variant: str,
    torch: str | None,
    staging: Path | None,
    dry_run: bool,
    cache_dir: Path | None,
    previous: Path,
) -> VariantOutcome:
    from envtool.core.plan import render_plan
    from envtool.workflows.lock import lock_environment

    lock_name = lock_file_name(variant)
    note(f"variant {variant}:")
    try:
        outcome = lock_environment(
            name,
            yml_text,
            source,
            replace(request, cuda=variant_cuda(variant) or CPU, torch=torch),
            str(staging) if staging else None,
            write_yml=False,
            probe=False,
            dry_run=dry_run,
            cache_dir=cache_dir,
            lock_name=lock_name,
            previous=previous,
        )
    except EnvtoolError as exc:  # which variant failed, in the one line
        cls = DiagnosedFailure if isinstance(exc, DiagnosedFailure) else UsageError
        raise cls(f"variant {variant}: {exc.message}", exc.hint) from None
    return VariantOutcome(
        variant,
        outcome.env_dir / lock_name,
        "dry-run" if dry_run else "written",
        render_plan(outcome.plan) if outcome.plan else [],
        outcome.packages,
        outcome.diff,
    )


def _install_variants(
    name: str,
    env_dir: Path,
    yml_text: str,
    results: list[VariantOutcome],
    requested: tuple[str, ...],
    torch: str | None,
    old: VariantIndex | None,
    replaces: str | None = None,
) -> VariantIndex:
    """Move the staged locks beside environment.yml, drop the locks of variants no longer asked
    for, and write the index — under the project mutex, so two locks never interleave."""
    import os

    from envtool.adapters.lockfile.variant_lock import variant_from_lock, write_index
    from envtool.adapters.mutex import hold_project_mutex
    from envtool.workflows.lock import refuse_changed_yml

    with hold_project_mutex(env_dir, name):
        # the variants were solved from yml_text before this wait, as `lock` solves
        refuse_changed_yml(
            env_dir / "environment.yml", yml_text if replaces is None else replaces, name
        )
        rows = []
        for r in results:
            final = env_dir / lock_file_name(r.name)
            if r.state == "written":
                os.replace(r.lock, final)
                r.lock = final
            rows.append(variant_from_lock(r.name, final))
        keep = {r.name for r in results}
        for v in old.variants if old else ():
            if v.name not in keep:  # names were checked when the index was read
                (env_dir / v.lock).unlink(missing_ok=True)
        rows.sort(key=lambda v: variant_sort_key(v.name))
        index = VariantIndex(name, requested, torch, tuple(rows))
        write_index(env_dir, index)
        if replaces is not None and replaces != yml_text:  # the edit lands with its locks
            from envtool.adapters.files import write_atomic

            write_atomic(env_dir / "environment.yml", yml_text)
    return index


def check_variants(
    name: str, env_dir: Path, yml_text: str, requested: tuple[str, ...] | None = None
) -> list[str] | None:
    """`lock --check` for the variant locks: None when the project has no index; the fresh lines
    when every variant lock is fresh (and, with `requested`, is the set asked for); else a
    DiagnosedFailure (exit 1) naming the first stale variant."""
    from envtool.core.shell_quote import quote_posix

    index = read_index(env_dir)
    if index is None:
        if requested is None:
            return None
        raise DiagnosedFailure(
            f"{index_path(env_dir)}: no variant index",
            f"run `envtool lock {quote_posix(name)} --variants {','.join(requested)}`",
        )
    problems = stale_variants(env_dir, yml_text, index)
    if requested is not None and index.requested != requested:
        problems.insert(0, f"{index_path(env_dir)}: locked {','.join(index.requested)}")
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise DiagnosedFailure(
            f"{problems[0]}{more}",
            f"run `envtool lock {quote_posix(name)} --variants {','.join(requested or index.requested)}`",
        )
    return [f"{name}: variant {v.name} is fresh ({env_dir / v.lock})" for v in index.variants]
