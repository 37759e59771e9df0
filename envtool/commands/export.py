"""`envtool export NAME | --lock FILE`: a portable environment.yml (or @EXPLICIT file) from a lock."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from envtool.commands import env_name, project_dir_option, renders
from envtool.core.shell_quote import printable, quote_posix
from envtool.errors import UsageError
from envtool.output import Result, note

if TYPE_CHECKING:
    from envtool.core.spec import EnvSpec

REQUEST_NAMES = ("environment.yml", "environment.yaml")


def read_request(lock_path: Path, sources: list[str]) -> EnvSpec | None:
    """The request the lock was solved from: the files in the lock's metadata.sources (merged, as
    conda-lock merges them), else environment.yml beside the lock, else None."""
    from envtool.adapters.install.installed import unsafe_path
    from envtool.core.spec import parse_environment_yml

    # a lock from elsewhere names its sources: only files in the lock's own folder are read (an
    # absolute or climbing source made export copy any readable file's channels into its output)
    outside = [s for s in sources if unsafe_path(s) is not None]
    if outside:
        shown = ", ".join(printable(repr(s))[:80] for s in outside)
        note(f"warning: ignoring the lock's sources outside its folder: {shown}")
    listed = [lock_path.parent / s for s in sources if unsafe_path(s) is None]
    found = [p for p in listed if p.is_file()]
    if found and len(found) < len(listed):
        missing = ", ".join(str(p) for p in listed if not p.is_file())
        note(f"warning: the lock was solved from more files than are here; missing: {missing}")
    if not found:
        found = [p for p in (lock_path.parent / n for n in REQUEST_NAMES) if p.is_file()][:1]
    specs = [parse_environment_yml(_read_text(p), str(p)) for p in found]
    if not specs:
        return None
    for spec, path in zip(specs, found, strict=True):
        spec.channels = [_located(c, path) for c in spec.channels]
    merged = specs[0]
    for extra in specs[1:]:
        names = {d.name for d in merged.dependencies}
        merged.dependencies += [d for d in extra.dependencies if d.name not in names]
        merged.channels += [c for c in extra.channels if c not in merged.channels]
        merged.pip += [p for p in extra.pip if p not in merged.pip]
    return merged


def _located(channel: str, env_file: Path) -> str:
    """A relative local channel of `env_file` as the folder it names (locate.local_channel, from
    locate.channel_base): an export written elsewhere must not carry `./chan`."""
    from envtool.adapters.locate import channel_base, local_channel

    folder = local_channel(channel, channel_base(env_file))
    return channel if folder is None or channel.startswith("~") else str(folder)


def _read_text(path: Path) -> str:
    """A request file beside the lock: read like every env file (regular, size-capped)."""
    from envtool.adapters.files import ENV_FILE_LIMIT, read_text

    return read_text(path, ENV_FILE_LIMIT, what="environment file")


def run_export(
    name: str | None,
    lock_file: Path | None,
    platform: str | None,
    fmt: str,
    output: Path | None,
    dry_run: bool,
    directory: str | None = None,
) -> str:
    """Build the export text; write it to `output` (atomically) unless dry_run. Returns the text.
    NAME's lock is environments/NAME/conda-lock.yml in the project folder `directory` (cwd)."""
    from envtool.adapters.locate import project_env_paths
    from envtool.adapters.lockfile.lock_io import read_lock
    from envtool.core.export import (
        explicit_platform,
        plan_export,
        render_explicit,
        render_export_env,
        select_platforms,
    )

    if name is not None and lock_file is not None:
        raise UsageError(
            f"NAME {name!r} and --lock {lock_file} both name a lock", "give NAME or --lock FILE"
        )
    if name is None and lock_file is None:  # the active environment's lock, as installed
        lock_file = active_env_lock()
    if lock_file is None:
        lock_file = project_env_paths(str(name), directory)[2].absolute()
        installed_from = None if directory else installed_lock(str(name))
        if not lock_file.is_file() and installed_from is not None:
            note(f"no {lock_file} here: exporting the lock {name} was installed from")
            lock_file = installed_from
        if not lock_file.is_file():
            where = f" --dir {quote_posix(directory)}" if directory else ""
            raise UsageError(
                f"{lock_file}: no lock for environment {name!r}",
                f"run `envtool lock {quote_posix(name)}{where}` (or `envtool create "
                f"{quote_posix(name)}{where}`) first, or pass --lock FILE",
            )
    lock = read_lock(lock_file)
    if fmt == "explicit":
        text = render_explicit(lock, explicit_platform(lock, platform))
    else:
        request = read_request(lock_file, lock.sources)
        if request is None:
            note(f"no environment.yml beside {lock_file}: exporting the lock's top-level packages")
        plan = plan_export(lock, request, select_platforms(lock, platform), name)
        for warning in plan.warnings:
            note(f"warning: {warning}")
        text = render_export_env(plan, lock_file.name)
    _write_output(text, output, dry_run)
    return text


def _write_output(text: str, output: Path | None, dry_run: bool) -> None:
    from envtool.adapters.files import write_atomic

    if output is not None:
        if dry_run:
            note(f"dry run: would write {len(text.splitlines())} lines to {output}")
        else:
            write_atomic(output, text)
            note(f"wrote {output}")


def run_pixi_export(name: str, directory: str | None) -> str:
    """environments/NAME as a pixi.toml: environment.yml's request, the platforms and CUDA of
    its locks (every variant lock as a feature + environment; conda-lock.yml alone as one)."""
    from envtool.adapters.locate import project_env_paths
    from envtool.adapters.lockfile.lock_io import read_lock
    from envtool.adapters.lockfile.variant_lock import read_index
    from envtool.core.pixi import plan_pixi_variant, render_pixi_toml
    from envtool.core.plan import DEFAULT_CHANNELS
    from envtool.core.spec import parse_environment_yml

    env_dir, yml_path, lock_path = project_env_paths(name, directory)
    if not yml_path.is_file():
        raise UsageError(
            f"{yml_path}: no environment.yml", f"run `envtool create {quote_posix(name)}`"
        )
    spec = parse_environment_yml(_read_text(yml_path), str(yml_path))
    index = read_index(env_dir)
    locks = [env_dir / v.lock for v in index.variants] if index else []
    if lock_path.is_file():
        locks.append(lock_path)
    if not locks:
        raise UsageError(f"{env_dir}: no lock", f"run `envtool lock {quote_posix(name)}` first")
    variants, platforms = [], []
    seen: set[str] = set()
    for path in locks:
        lock = read_lock(path)
        meta = lock.custom_metadata
        platforms += [p for p in lock.platforms if p not in platforms]
        cuda = meta.get("envtool_cuda") or None
        cuda = None if cuda == "cpu" else cuda
        label = f"cuda{cuda}" if cuda else "cpu"
        if label in seen:
            continue
        seen.add(label)
        flavor = meta.get("envtool_flavor", "conda-forge")
        variants.append(plan_pixi_variant(label, cuda, flavor, meta.get("envtool_cuda_arch")))
    # pixi takes a channel name or URL: a local folder becomes its file:// URL
    channels = [
        Path(c).as_uri() if Path(c).is_absolute() else c
        for c in (_located(c, yml_path) for c in spec.channels or DEFAULT_CHANNELS["conda-forge"])
    ]
    pypi = [(line.name, line.specifier or "*") for line in spec.pip_lines() if line.name]
    skipped = [line.raw for line in spec.pip_lines() if not line.name]
    if skipped:
        note(f"note: pip entries a pixi.toml cannot carry, left out: {', '.join(skipped)}")
    return render_pixi_toml(
        spec.name or name, channels, platforms, spec.dependencies, pypi, variants, str(yml_path)
    )


def installed_lock(name: str) -> Path | None:
    """The lock the installed env NAME records it came from, when that file is still there
    (export NAME run outside its project: the env knows its project)."""
    from envtool.adapters.install.install_state import read_state_record
    from envtool.adapters.locate import env_prefix

    try:
        recorded = (read_state_record(env_prefix(name, None)) or {}).get("lock_path")
    except UsageError:
        return None
    if isinstance(recorded, str) and Path(recorded).is_file():
        return Path(recorded)
    return None


def active_env_lock() -> Path:
    """No NAME, no --lock: the lock the active environment (core/target's rule) was installed
    from, as its install record names it."""
    from envtool.adapters.install.installed import describe_env
    from envtool.commands import refuse_own_env, resolve_and_say

    target = resolve_and_say("export", "exporting the lock of", None, None, None)
    refuse_own_env(target, "export", other="--lock FILE")
    recorded = describe_env(target.prefix or target.python.parent).get("lock_path")
    if not recorded or not Path(recorded).is_file():
        what = "was not installed by envtool" if not recorded else f"names {recorded}, not here"
        raise UsageError(
            f"{target.prefix or target.python}: this {target.kind} {what} (no lock to export)",
            "pass NAME (environments/NAME/conda-lock.yml) or --lock FILE",
        )
    return Path(recorded)


@click.command("export")
@env_name
@click.option(
    "--lock", "lock_file", type=click.Path(path_type=Path), help="Export this conda-lock.yml."
)
@click.option("--platform", help="Platform to export (default: all locked; explicit: linux-64).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["env", "explicit", "pixi"]),
    default="env",
    show_default=True,
    help="env: portable environment.yml; explicit: conda @EXPLICIT URL list for one platform; "
    "pixi: a pixi.toml (variants as features and environments).",
)
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write here (atomically).")
@click.option("--dry-run", is_flag=True, help="Print the export; write nothing.")
@click.option("--variant", help="Export this variant of NAME's variant locks (cpu, cuda12.6, …).")
@project_dir_option
@renders
def cmd(
    name: str | None,
    lock_file: Path | None,
    platform: str | None,
    fmt: str,
    output: Path | None,
    dry_run: bool,
    variant: str | None = None,
    directory: str | None = None,
) -> Result:
    """Write a portable environment.yml (or @EXPLICIT file) from environments/NAME/conda-lock.yml.

    Top-level specs are pinned to the locked versions without build strings, except CUDA builds,
    which keep a glob (pytorch=2.7.1=*cuda126*) so a re-solve cannot fall back to CPU.
    """
    if directory is not None and lock_file is not None:
        raise UsageError(
            f"--dir {directory}: --dir is the project folder holding environments/NAME",
            "give NAME with --dir, or --lock FILE alone",
        )
    if variant is not None:  # environments/NAME/conda-lock.<variant>.yml, known to the index
        from envtool.adapters.lockfile.variant_lock import pick_variant_lock

        name, lock_file = None, pick_variant_lock(variant, lock_file, name, directory)
    if fmt == "pixi":
        if not name or lock_file is not None or variant is not None:
            raise UsageError("--format pixi exports NAME's request and every variant", "give NAME")
        text = run_pixi_export(name, directory)
        _write_output(text, output, dry_run)
    else:
        text = run_export(name, lock_file, platform, fmt, output, dry_run, directory)
    return Result("export", raw=text if output is None or dry_run else "")
