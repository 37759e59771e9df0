"""`envtool lock NAME`: re-solve environments/NAME/environment.yml into conda-lock.yml.

A no-op when the inputs are unchanged: the input hash (environment.yml + the plan options stored in
the lock + local channel repodata identity + envtool version) is compared before rattler or
conda-lock are imported. `--check` exits 1 when the lock is stale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from envtool.adapters.locate import project_env_paths
from envtool.commands import env_name, project_dir_option, renders
from envtool.core.shell_quote import quote_posix
from envtool.errors import DiagnosedFailure, UsageError
from envtool.output import Result
from envtool.workflows.lock_fresh import fresh_result, lock_freshness
from envtool.workflows.lock_outcome import summarize_lock

if TYPE_CHECKING:
    from envtool.workflows.variants import VariantsOutcome


@click.command("lock")
@env_name(required=True)
@project_dir_option
@click.option(
    "--check", is_flag=True, help="Exit 1 if the lock is stale, 0 if fresh; write nothing."
)
@click.option(
    "--force",
    is_flag=True,
    help="Re-solve even when the inputs are unchanged (picks up new packages in remote channels).",
)
@click.option("--dry-run", is_flag=True, help="Solve and print the plan; write nothing.")
@click.option(
    "--variants",
    help="Lock one conda-lock file per variant (cpu,cuda11.8,cuda12.6 or auto) plus an index; "
    "`envtool install NAME` picks the one this host runs.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(
    name: str,
    directory: str | None,
    check: bool,
    force: bool,
    dry_run: bool,
    variants: str | None,
    as_json: bool,
) -> Result:
    """Re-lock environments/NAME from its environment.yml (no-op when nothing changed)."""
    env_dir, yml_path, lock_path = project_env_paths(name, directory)
    from envtool.adapters.files import ENV_FILE_LIMIT, read_text

    if not yml_path.exists() and not yml_path.is_symlink():
        q = quote_posix(name)
        raise UsageError(
            f"{yml_path}: no environment.yml",
            # the lock without its request: re-creating would solve anew; the lock still installs
            f"restore it (e.g. from git); `envtool install {q}` installs the lock as it is"
            if lock_path.is_file()
            else f"create it with `envtool create {q} --no-install`",
        )
    yml_text = read_text(yml_path, ENV_FILE_LIMIT, what="environment file")
    if variants is None and not lock_path.exists():  # a variants-only project: re-lock those
        from envtool.adapters.lockfile.variant_lock import indexed_variants

        variants = indexed_variants(env_dir)
    if variants is not None:  # variant locks: workflows/variants.py
        result = variants_command(
            name, yml_text, str(yml_path), variants, directory,
            check=check, force=force, dry_run=dry_run,
        )  # fmt: skip
        return result
    variant_lines = None
    if check:  # every variant lock is checked too; a variants-only project has no conda-lock.yml
        from envtool.workflows.variants import check_variants

        variant_lines = check_variants(name, env_dir, yml_text)
        if variant_lines is not None and not lock_path.exists():
            return Result("lock", {"name": name, "state": "fresh"}, variant_lines)
    state = lock_freshness(yml_text, lock_path, env_dir)
    stamp, stored, edited, fresh = state.stamp, state.stored, state.edited, state.fresh
    if check:
        if not fresh:  # the CLI prints the error (and, with --json, its envelope)
            if not lock_path.is_file():
                state = "missing"
            elif stamp is None:  # conda-lock's own, or hand-edited: no way to tell if it is fresh
                from envtool.adapters.lockfile.lock_io import read_lock

                read_lock(lock_path)  # a lock that does not parse says so, naming the line
                state = "not envtool's (it records no input hash, so freshness is unknown)"
            elif edited == "edited":
                state = "edited since envtool wrote it (its content digest no longer matches)"
            elif edited == "no digest":
                state = "unverified (written by an envtool that recorded no content digest)"
            else:
                state = "stale"
            raise DiagnosedFailure(
                f"{lock_path}: lock is {state}",
                f"run `envtool lock {quote_posix(name)}` to update it",
            )
        return Result(
            "lock",
            {"name": name, "state": "fresh", "lock": str(lock_path)},
            [f"{name}: lock is fresh ({lock_path})", *(variant_lines or [])],
        )
    if fresh and not force:  # answered without the lock workflow's imports
        return fresh_result(env_dir, stamp, name, dry_run)
    from envtool.workflows.lock import lock_environment, request_from_yml

    request = request_from_yml(yml_text, str(yml_path), {}, stored)
    outcome = lock_environment(
        name,
        yml_text,
        str(yml_path),
        request,
        directory,
        write_yml=False,
        probe=stored is None,
        dry_run=dry_run,
    )
    return summarize_lock(outcome, name, "lock", dry_run)


def summarize_variants(outcome: VariantsOutcome, dry_run: bool) -> Result:
    """`lock --variants`' Result: each variant's state, the torch pin, the index written."""
    from envtool.adapters.lockfile.variant_lock import index_path

    data: dict[str, Any] = {
        "name": outcome.name,
        "env_dir": str(outcome.env_dir),
        "requested": list(outcome.requested),
        "torch": outcome.torch,
        "changed": outcome.changed,
        "written": outcome.written,
        "dry_run": dry_run,
        "variants": [
            {
                "name": v.name,
                "lock": str(v.lock),
                "state": v.state,
                "packages": v.packages,
                "lock_diff": v.diff.to_dict() if v.diff else None,
            }
            for v in outcome.variants
        ],
        "index": str(index_path(outcome.env_dir)) if outcome.index else None,
        "notes": outcome.notes,
    }
    text = list(outcome.notes)
    if not outcome.changed:
        text.append(
            f"{outcome.name}: variant locks are up to date ({', '.join(v.name for v in outcome.variants)})"
        )
        return Result("lock", data, text)
    pin = f"torch {outcome.torch}" if outcome.torch else "torch per variant"
    text.append(f"{outcome.name}: {len(outcome.variants)} variants, {pin}")
    described = {v.name: v.describe() for v in outcome.index.variants} if outcome.index else {}
    for v in outcome.variants:
        counts = ", ".join(f"{p}: {n} packages" for p, n in v.packages.items())
        what = described.get(v.name, v.name)
        state = {"fresh": "unchanged", "written": f"wrote {v.lock.name}", "dry-run": "solved"}[
            v.state
        ]
        text.append(f"  {what} — {state}" + (f" ({counts})" if counts else ""))
        if dry_run:
            text += [f"    {line}" for line in v.plan_text]
        if v.diff is not None:
            from envtool.core.lock_diff import render_lock_diff

            text += [f"    {line}" for line in render_lock_diff(v.diff)]
    if outcome.written:
        text.append(f"wrote {index_path(outcome.env_dir)}")
    else:
        text.append("dry run: nothing written")
    return Result("lock", data, text)


def variants_command(
    name: str,
    yml_text: str,
    source: str,
    variants: str,
    directory: str | None,
    *,
    check: bool,
    force: bool,
    dry_run: bool,
) -> Result:
    """`envtool lock NAME --variants LIST|auto [--check|--force|--dry-run]`."""
    from envtool.core.variants import parse_variant_list
    from envtool.workflows.variants import check_variants, lock_variants

    requested = parse_variant_list(variants)
    env_dir = project_env_paths(name, directory)[0]
    if check:
        lines = check_variants(name, env_dir, yml_text, requested) or []
        return Result("lock", {"name": name, "state": "fresh", "variants": lines}, lines)
    outcome = lock_variants(
        name, yml_text, source, requested, directory, force=force, dry_run=dry_run
    )
    return summarize_variants(outcome, dry_run)
