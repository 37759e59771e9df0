"""`envtool bundle NAME -o DIR`: the lock plus a local channel, for installs with no network."""

from __future__ import annotations

from pathlib import Path

import click

from envtool.commands import env_name, renders
from envtool.core.shell_quote import quote_posix
from envtool.output import Result


@click.command("bundle")
@env_name
@click.option(
    "--lock", "lock_file", help="Bundle this lock (default: environments/NAME/conda-lock.yml)."
)
@click.option("-o", "--output", "out_dir", required=True, help="Directory to write (created).")
@click.option(
    "--platform",
    "platforms",
    multiple=True,
    help="Only these platforms (default: all in the lock).",
)
@click.option("--dry-run", is_flag=True, help="List what would be bundled; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(
    name: str | None,
    lock_file: str | None,
    out_dir: str,
    platforms: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
) -> Result:
    """Write DIR/conda-lock.yml and DIR/channel/ holding exactly the locked, hash-checked files."""
    from envtool.adapters.locate import project_lock_path
    from envtool.errors import UsageError

    if lock_file:
        lock = Path(lock_file)
    elif name:
        lock = project_lock_path(name)
    else:
        raise UsageError("give NAME or --lock FILE", "e.g. `envtool bundle myenv -o myenv-bundle`")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out_dir}: not a directory", "pick a new directory")
    if out.exists() and any(out.iterdir()) and not (out / "conda-lock.yml").exists():
        raise UsageError(
            f"-o {out_dir}: directory exists and is not a bundle", "pick a new directory"
        )
    from envtool.adapters.lockfile import variant_lock as vl

    if name and not lock_file and vl.has_index(lock.parent):  # every variant; install picks
        if dry_run:  # the same checks as the bundle itself
            _, files = vl.plan_variant_bundle(lock.parent, out, name, list(platforms) or None)
            text = [f"would bundle {len(files)} files (every variant) into {out}"]
            return Result("bundle", {"dry_run": True, "files": files}, text)
        data = vl.write_variant_bundle(
            lock.parent, out, name, list(platforms) or None, progress=not as_json
        )
        text = [
            f"bundled {len(data['files'])} files of variants {', '.join(data['variants'])} "  # type: ignore[arg-type]
            f"into {out}",
            f"install offline with: envtool install --from {quote_posix(str(out))}   "
            "(the variant is chosen on that machine)",
        ]
        return Result("bundle", data, text)
    if dry_run:  # the same checks as the bundle itself
        from envtool.adapters.install.bundle import plan_bundle, plan_bundle_files

        files = plan_bundle_files(plan_bundle(lock, out, list(platforms) or None)[2])
        return Result(
            "bundle",
            {"dry_run": True, "files": files},
            [f"would bundle {len(files)} files into {out}"],
        )
    from envtool.adapters.install.bundle import write_bundle

    env_name = name or Path(lock).resolve().parent.name  # environments/NAME/conda-lock.yml
    data = write_bundle(lock, out, list(platforms) or None, progress=not as_json, name=env_name)
    text = [
        f"bundled {len(data['files'])} files into {out}",
        f"install offline with: envtool install --from {quote_posix(str(out))}   "
        f"(as {quote_posix(env_name)}; or pass a NAME)",
    ]
    return Result("bundle", data, text)
