"""The package verbs' shared steps: `envtool add`, `drop` and `update` edit (or keep)
environments/NAME/environment.yml, re-lock every lock the project has (conda-lock.yml and every
variant lock), then install unless told not to.

Nothing half-written: the edited environment.yml is written only with the lock(s) solved from it,
under the project mutex (lock_environment's / lock_variants' `replaces`); a failed solve leaves
the file and the locks as they were. A project with both a conda-lock.yml and variant locks
re-locks the variants first (the edit lands with them), then conda-lock.yml; if that second
solve fails, environment.yml is put back as it was (the variant locks are then stale, and
`envtool lock NAME --check` says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envtool.adapters.locate import project_env_paths
from envtool.core.env_edit import Edit
from envtool.core.shell_quote import quote_posix
from envtool.errors import EnvtoolError, UsageError
from envtool.output import Result, note
from envtool.workflows.lock import LockOutcome
from envtool.workflows.variants import VariantsOutcome


@dataclass
class RelockOutcome:
    name: str
    env_dir: Path
    dry_run: bool
    edit: Edit | None = None
    lock: LockOutcome | None = None
    variants: VariantsOutcome | None = None
    installed: dict[str, Any] | None = None  # the install report (to_dict), when installed
    notes: list[str] = field(default_factory=list)

    @property
    def written(self) -> bool:
        return bool((self.lock and self.lock.written) or (self.variants and self.variants.written))


def read_request_file(name: str, directory: str | None) -> tuple[Path, str]:
    """environments/NAME/environment.yml and its text (bounded read)."""
    from envtool.adapters.files import ENV_FILE_LIMIT, read_text

    yml_path = project_env_paths(name, directory)[1]
    if not yml_path.exists() and not yml_path.is_symlink():
        raise UsageError(
            f"{yml_path}: no environment.yml",
            f"create it with `envtool create {quote_posix(name)} --no-install`",
        )
    return yml_path, read_text(yml_path, ENV_FILE_LIMIT, what="environment file")


def parse_package_args(packages: tuple[str, ...], what: str) -> list[Any]:
    """PKG arguments as conda specs (core/spec), each one rattler can read; a one-line error
    naming the argument otherwise."""
    from envtool.adapters.solve.rattler_solve import check_specs
    from envtool.core.spec import parse_conda_spec

    specs = []
    for text in packages:
        try:
            spec = parse_conda_spec(text)
        except ValueError as exc:  # the reason already echoes the spec, cut and escaped
            raise UsageError(
                f"{what}: {exc}", "use conda's form `name`, `name>=1.2` or `name=1.2`"
            ) from None
        check_specs([spec], what)
        specs.append(spec)
    return specs


def hold_others(lock_path: Path, updated: set[str]) -> dict[str, tuple[str, ...]]:
    """Per platform, a constraint keeping every conda package of the lock at its locked version
    and build, except the ones `update NAME PKG…` names (pixi's `update PKG`)."""
    from envtool.adapters.lockfile.lock_io import read_lock

    lock = read_lock(lock_path)
    names = {p.name for p in lock.packages if p.manager == "conda"}
    missing = sorted(updated - names)
    if missing:
        raise UsageError(
            f"{lock_path}: {', '.join(missing)} not in the lock", "name packages the lock holds"
        )
    hold: dict[str, list[str]] = {}
    for p in lock.packages:
        if p.manager == "conda" and p.name not in updated and not p.optional:
            build = f" {p.build}" if p.build else ""
            hold.setdefault(p.platform, []).append(f"{p.name} =={p.version}{build}")
    return {k: tuple(v) for k, v in hold.items()}


def relock(
    name: str,
    directory: str | None,
    new_text: str,
    old_text: str,
    *,
    force: bool = False,
    dry_run: bool = False,
    updated: set[str] | None = None,
) -> RelockOutcome:
    """Re-lock environments/NAME from `new_text` (every lock it has: conda-lock.yml, the variant
    locks; conda-lock.yml alone when it has neither); `old_text` is what is on disk now.
    `updated`: `update NAME PKG…`'s names (every other package held at its locked build)."""
    from envtool.adapters.lockfile.lock_io import stored_lock_options
    from envtool.adapters.lockfile.variant_lock import indexed_variants
    from envtool.core.variants import parse_variant_list
    from envtool.workflows.lock import lock_environment, request_from_yml
    from envtool.workflows.variants import lock_variants

    env_dir, yml_path, lock_path = project_env_paths(name, directory)
    outcome = RelockOutcome(name, env_dir, dry_run)
    replaces = old_text if new_text != old_text else None
    variants = indexed_variants(env_dir)
    if variants is not None:
        if updated:
            raise UsageError(
                f"{name}: update PKG… holds the other packages of one lock; this project has "
                "variant locks",
                f"update every package: `envtool update {quote_posix(name)}`",
            )
        outcome.variants = lock_variants(
            name,
            new_text,
            str(yml_path),
            parse_variant_list(variants),
            directory,
            force=force,
            dry_run=dry_run,
            replaces=replaces,
        )
        if not lock_path.exists():
            return outcome
        replaces = None if outcome.variants.written else replaces
    stored = stored_lock_options(lock_path)[1]
    hold = hold_others(lock_path, updated) if updated and lock_path.is_file() else None
    request = request_from_yml(new_text, str(yml_path), {}, stored)
    try:
        outcome.lock = lock_environment(
            name,
            new_text,
            str(yml_path),
            request,
            directory,
            write_yml=False,
            probe=stored is None,
            dry_run=dry_run,
            replaces=replaces,
            hold=hold,
        )
    except EnvtoolError:
        if outcome.variants is not None and outcome.variants.written and new_text != old_text:
            from envtool.adapters.files import write_atomic

            write_atomic(yml_path, old_text)  # the edit did not land: the file as it was
            note(f"note: {yml_path} put back; the variant locks are stale (`envtool lock --check`)")
        raise
    return outcome


def install_relocked(name: str, directory: str | None, progress: bool) -> dict[str, Any]:
    """Install environments/NAME from the lock just written (the variant this host picks, when
    the project has variant locks): the host check, the mutexes and the installer `envtool
    install NAME` uses."""
    from envtool.adapters.install.installer import apply_install
    from envtool.adapters.locate import env_prefix
    from envtool.adapters.lockfile.variant_lock import choose_in
    from envtool.workflows.install import hold_install_mutexes, plan_from_lock

    env_dir, _, lock_path = project_env_paths(name, directory)
    relock_hint = f"re-lock: `envtool lock {quote_posix(name)} --variants …`"
    picked = choose_in(env_dir, None, None, False, relock_hint, relock_hint)
    variant = None
    if picked is not None:
        lock_path = picked[0]
        variant = {
            "variant": picked[1].variant.name,
            "mode": picked[1].mode,
            "reason": picked[1].reason,
        }
        note(f"variant {picked[1].variant.name}: {picked[1].reason}")
    target = env_prefix(name, None)
    with hold_install_mutexes(lock_path, target, name):
        planned = plan_from_lock(lock_path, target, [], False, None, False, variant)
        report = apply_install(planned, progress=progress, force=False)
    return {"prefix": str(target), **report.to_dict()}


def edit_verb(
    command: str,
    name: str,
    directory: str | None,
    add: tuple[str, ...],
    drop: tuple[str, ...],
    *,
    no_install: bool,
    dry_run: bool,
    as_json: bool,
) -> Result:
    """`add` and `drop`: environment.yml edited (core/env_edit), every lock re-solved from the
    edit, installed unless --no-install / --dry-run."""
    from envtool.core.env_edit import edit_dependencies

    if not (add or drop):  # click no longer demands PKG: -n NAME leaves every positional a PKG
        raise UsageError(
            f"envtool {command}: no package given",
            f"name one or more: `envtool {command} {quote_posix(name)} numpy`",
        )
    from envtool.core.pixi import TORCH_NAMES

    torch = [p for p in drop if p in TORCH_NAMES]
    if torch:  # the plan adds the torch build --cuda picked to every solve: a drop would not hold
        raise UsageError(
            f"envtool drop: {torch[0]} is what {name} is built around (its CUDA build comes from "
            "create's --cuda, and every re-lock asks for it again)",
            "to change its build: `envtool create "
            f"{quote_posix(name)} --cuda …`; an env without torch is another env "
            "(envtool create OTHER -f FILE)",
        )
    yml_path, old = read_request_file(name, directory)
    specs = parse_package_args(add, command) if add else []
    edit = edit_dependencies(old, str(yml_path), specs, list(dict.fromkeys(drop)))
    outcome = relock(name, directory, edit.text, old, dry_run=dry_run)
    outcome.edit = edit
    return finish_verb(command, outcome, directory, no_install, as_json)


def finish_verb(
    command: str, outcome: RelockOutcome, directory: str | None, no_install: bool, as_json: bool
) -> Result:
    """Install what was re-locked (unless --no-install or --dry-run) and the verb's Result."""
    if not (no_install or outcome.dry_run):
        outcome.installed = install_relocked(outcome.name, directory, progress=not as_json)
    return Result(command, relock_data(outcome), render_relock(outcome))


def render_relock(outcome: RelockOutcome) -> list[str]:
    """The package verbs' text: the edit, each lock's diff, what was written and installed."""
    from envtool.core.lock_diff import render_lock_diff

    text: list[str] = []
    edit = outcome.edit
    if edit is not None:
        text += [f"environment.yml: + {s}" for s in edit.added]
        text += [f"environment.yml: {old} → {new}" for old, new in edit.replaced]
        text += [f"environment.yml: - {s}" for s in edit.dropped]
        text += list(edit.notes)
    if outcome.variants is not None:
        for v in outcome.variants.variants:
            if v.diff is not None:
                text += render_lock_diff(v.diff, v.name)
            else:
                text.append(f"{v.name}: lock unchanged")
    if outcome.lock is not None and outcome.lock.diff is not None:
        text += render_lock_diff(outcome.lock.diff)
    if outcome.dry_run:
        text.append("dry run: nothing written")
    elif outcome.written:
        text.append(f"wrote {outcome.env_dir}")
    if outcome.installed is not None:
        text.append(f"installed {outcome.name} at {outcome.installed['prefix']}")
    return text


def relock_data(outcome: RelockOutcome) -> dict[str, Any]:
    """The package verbs' --json fields."""
    edit = outcome.edit
    data: dict[str, Any] = {
        "name": outcome.name,
        "env_dir": str(outcome.env_dir),
        "dry_run": outcome.dry_run,
        "written": outcome.written,
        "edit": None
        if edit is None
        else {
            "added": list(edit.added),
            "replaced": [list(r) for r in edit.replaced],
            "dropped": list(edit.dropped),
        },
        "lock_diff": outcome.lock.diff.to_dict() if outcome.lock and outcome.lock.diff else None,
        "variants": None
        if outcome.variants is None
        else [
            {
                "name": v.name,
                "state": v.state,
                "lock_diff": v.diff.to_dict() if v.diff else None,
            }
            for v in outcome.variants.variants
        ],
        "installed": outcome.installed,
    }
    return data
