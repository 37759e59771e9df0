"""Variant locks on disk: the channel's torch builds (rattler), the index (read bounded and strict,
written atomically) and what a written variant lock holds.

The workflow that solves and writes the variants is envtool/workflows/variants.py; the pure model
and the install choice are core/variants.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from envtool.core.variants import (
    INDEX_FILE,
    ChannelBuild,
    Choice,
    PlatformBuild,
    Variant,
    VariantIndex,
    host_gpus,
    lock_file_name,
    parse_index,
    render_index,
    variant_sort_key,
)
from envtool.errors import UsageError

if TYPE_CHECKING:
    from envtool.core.facts import HostFacts

INDEX_LIMIT = 1024 * 1024  # a few hundred bytes per variant; anything near this is not an index


def discover_builds(
    channels: list[str],
    platforms: list[str],
    cache_dir: Path | None = None,
    base: Path | None = None,
) -> list[ChannelBuild]:
    """The pytorch builds (CUDA and CPU) of the first channel that has any, per platform: the same
    listing `lock_environment` plans `--cuda auto` from (rattler_solve's discovery)."""
    import asyncio

    from envtool.adapters.solve.rattler_solve import _discover

    async def run() -> list[ChannelBuild]:
        from envtool.adapters.solve.network import gateway as make_gateway

        try:
            gateway = make_gateway(cache_dir)  # rattler's client: retries, credentials, mirrors
            found = await _discover(gateway, channels, platforms, base)
            return [ChannelBuild(b.torch, b.cuda, b.python, b.platform) for b in found]
        finally:
            await asyncio.sleep(0.05)  # rattler's background tasks end before the loop closes

    return asyncio.run(run())


def index_path(env_dir: Path) -> Path:
    return env_dir / INDEX_FILE


def has_index(env_dir: Path) -> bool:
    path = index_path(env_dir)
    return path.exists() or path.is_symlink()


def read_index(env_dir: Path) -> VariantIndex | None:
    """environments/NAME/variants.yml, or None when there is none. Bounded read (a FIFO or a
    device there does not hang), strict parse; a bad index is a one-line UsageError."""
    from envtool.adapters.files import read_text

    path = index_path(env_dir)
    if not has_index(env_dir):
        return None
    return parse_index(read_text(path, INDEX_LIMIT, what="variant index"), str(path))


def write_index(env_dir: Path, index: VariantIndex) -> Path:
    """Write the index atomically; an unchanged index keeps its file (and mtime)."""
    from envtool.adapters.files import read_bytes, write_atomic

    path = index_path(env_dir)
    text = render_index(index)
    try:
        current = read_bytes(path, INDEX_LIMIT, what="variant index") if path.is_file() else None
    except UsageError:
        current = None
    if current != text.encode("utf-8"):
        write_atomic(path, text)
    return path


def file_sha256(path: Path) -> str:
    from envtool.adapters.files import LOCK_FILE_LIMIT, read_bytes

    return hashlib.sha256(read_bytes(path, LOCK_FILE_LIMIT, what="lock file")).hexdigest()


def variant_from_lock(name: str, lock_path: Path) -> Variant:
    """The index row of a written variant lock: its hash, and what envtool recorded in it (CUDA,
    minimum driver, GPU architectures) plus the pytorch build each platform locked."""
    from envtool.adapters.lockfile.lock_io import read_lock
    from envtool.core.cuda import parse_arch_list

    lock = read_lock(lock_path)
    meta = lock.custom_metadata
    builds = []
    for platform in sorted(lock.platforms):
        torch = lock.conda(platform).get("pytorch")
        if torch is None:
            raise UsageError(
                f"{lock_path}: no pytorch in the {platform} solution",
                "re-lock with `envtool lock NAME --variants …`",
            )
        builds.append(PlatformBuild(platform, torch.version, torch.build))
    archs = parse_arch_list(meta.get("envtool_gpu_archs", "")) if name != "cpu" else ()
    return Variant(
        name,
        lock_file_name(name),
        lock.sha256,
        meta.get("envtool_min_driver") or None,
        tuple(archs),
        tuple(builds),
    )


def index_problems(env_dir: Path, index: VariantIndex) -> list[str]:
    """Variant locks that are missing or differ from the bytes the index recorded (hand-edited,
    or written by another tool since): one line each."""
    out = []
    for v in index.variants:
        path = env_dir / v.lock
        if not path.is_file():
            out.append(f"{path}: missing")
        elif file_sha256(path) != v.sha256:
            out.append(f"{path}: changed since it was indexed")
    return out


def choose_project_variant(
    name: str, variant: str | None, platform: str | None, force: bool
) -> tuple[Path, Choice] | None:
    """`envtool install NAME` in a project with variant locks: the lock this host installs and
    why (None when environments/NAME has no index). `variant` (--variant) overrides the choice,
    after the host check unless `force`."""
    from envtool.adapters.locate import project_env_paths
    from envtool.core.shell_quote import quote_posix

    env_dir = project_env_paths(name)[0]
    relock = f"re-lock: `envtool lock {quote_posix(name)} --variants …`"
    first = f"lock them first: `envtool lock {quote_posix(name)} --variants auto`"
    return choose_in(env_dir, variant, platform, force, relock, first)


def choose_in(
    folder: Path,
    variant: str | None,
    platform: str | None,
    force: bool,
    relock: str,
    no_index: str,
) -> tuple[Path, Choice] | None:
    """The variant lock in `folder` (a project's environments/NAME, or a bundle DIR) this host
    installs, and why; None when `folder` has no index and no --variant was given."""
    from envtool.adapters.host.host_probe import probe_host
    from envtool.core.variants import check_chosen, choose_variant, parse_variant

    index = read_index(folder)
    if index is None:
        if variant is None:
            return None
        raise UsageError(
            f"--variant {variant}: {folder} has no variant locks ({INDEX_FILE})", no_index
        )
    problems = index_problems(folder, index)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UsageError(problems[0] + more, relock.replace("…", ",".join(index.requested)))
    if platform is None:
        from envtool.adapters.locate import current_platform

        platform = current_platform()
    if variant is not None and force:  # --force: no host check, only a known variant
        wanted = parse_variant(variant)
        if index.get(wanted) is None:
            check_chosen(wanted, None, [], index, platform)  # raises: no such variant
        chosen = index.get(wanted)
        assert chosen is not None
        choice = Choice(chosen, "forced", f"--variant {wanted} --force (host not checked)")
    else:
        host = probe_host()
        driver, gpus = host.driver_version, host_gpus(host)
        if variant is not None:
            choice = check_chosen(parse_variant(variant), driver, gpus, index, platform)
        else:
            choice = choose_variant(driver, gpus, index, platform, host.no_driver_reason)
    return (folder / choice.variant.lock).absolute(), choice


def choose_bundle_variant(
    bundle: Path, variant: str | None, platform: str | None, force: bool
) -> tuple[Path, Choice] | None:
    """`envtool install --from DIR` of a bundle that carries every variant: chosen on the
    offline machine, like `install NAME`."""
    from envtool.core.shell_quote import quote_posix

    again = "write the bundle again with `envtool bundle NAME -o DIR`"
    bundle = Path(bundle).expanduser()
    got = choose_in(
        bundle,
        variant,
        platform,
        force,
        again,
        f"{again}: {quote_posix(str(bundle))} carries one lock",
    )
    return got


def write_variant_bundle(
    env_dir: Path, out_dir: Path, name: str, platforms: list[str] | None, progress: bool
) -> dict[str, object]:
    """`envtool bundle NAME -o DIR` of a project with variant locks: every variant's lock and
    files in one bundle (one channel), plus the index, so `install --from DIR` chooses on the
    offline machine. DIR/conda-lock.yml is the cpu variant's when there is one (what an
    envtool that knows no variants installs), else the newest CUDA variant's."""
    from envtool.adapters.files import LOCK_FILE_LIMIT, read_bytes, write_atomic
    from envtool.adapters.install.bundle import write_bundle

    index, _ = plan_variant_bundle(env_dir, out_dir, name, platforms)
    # cpu last: write_bundle copies each lock to DIR/conda-lock.yml, the last one stays
    order = sorted(index.variants, key=lambda v: (v.cuda is None, variant_sort_key(v.name)))
    files: set[str] = set()
    data: dict[str, object] = {}
    for v in order:
        data = write_bundle(env_dir / v.lock, out_dir, platforms, progress=progress, name=name)
        files.update(str(f) for f in data["files"])  # type: ignore[attr-defined]
        write_atomic(out_dir / v.lock, read_bytes(env_dir / v.lock, LOCK_FILE_LIMIT, what="lock"))
    write_atomic(out_dir / INDEX_FILE, read_bytes(index_path(env_dir), INDEX_LIMIT))
    return {**data, "variants": index.names(), "files": sorted(files)}


def pick_variant_lock(
    variant: str, lock_file: str | None, name: str | None, directory: str | None = None
) -> Path:
    """`--variant V` beside NAME (verify, export): the variant's lock, or exit 2 when --lock
    also picks one or NAME is missing."""
    from envtool.errors import UsageError

    if lock_file:
        raise UsageError(
            f"--variant {variant} and --lock {lock_file} both pick the lock", "drop one of them"
        )
    if not name:
        raise UsageError(
            f"--variant {variant} picks among NAME's variant locks", "give NAME as well"
        )
    return variant_lock_path(name, variant, directory)


def variant_lock_path(name: str, variant: str, directory: str | None = None) -> Path:
    """`--variant V` of verify/export: environments/NAME/conda-lock.V.yml, known to the index
    (in the project folder `directory`, default: cwd)."""
    from envtool.adapters.locate import project_env_paths
    from envtool.core.shell_quote import quote_posix
    from envtool.core.variants import parse_variant

    wanted = parse_variant(variant)
    env_dir = project_env_paths(name, directory)[0]
    index = read_index(env_dir)
    if index is None:
        raise UsageError(
            f"--variant {variant}: {env_dir} has no variant locks ({INDEX_FILE})",
            f"lock them first: `envtool lock {quote_posix(name)} --variants auto`",
        )
    row = index.get(wanted)
    if row is None:
        raise UsageError(
            f"--variant {wanted}: {name}'s lock has no such variant",
            f"use one of {', '.join(index.names())}",
        )
    return (env_dir / row.lock).absolute()


def doctor_variant_check(host: HostFacts, install_lock: str | None, env_label: str) -> object:
    """doctor's variant-choice check for an env installed from a variant lock (None otherwise,
    or when its index is gone): which variant this host would install now."""
    from envtool.core.shell_quote import quote_posix
    from envtool.core.variants import check_installed_variant, choose_variant, variant_of_lock_file

    installed = variant_of_lock_file(install_lock)
    if installed is None or install_lock is None:
        return None
    label = env_label if env_label == "NAME" else quote_posix(env_label)
    env_dir = Path(install_lock).parent
    try:
        index = read_index(env_dir)
    except UsageError:
        return None  # a broken index is lock --check's finding
    if index is None:
        return None
    platform = host.platform or "linux-64"
    try:
        pick = choose_variant(
            host.driver_version, host_gpus(host), index, platform, host.no_driver_reason
        )
    except UsageError as exc:
        return check_installed_variant(installed, label, None, exc.one_line())
    return check_installed_variant(installed, label, pick, None)


def plan_variant_bundle(
    env_dir: Path, out_dir: Path, name: str, platforms: list[str] | None
) -> tuple[VariantIndex, list[str]]:
    """Every check `bundle` of a project with variant locks makes before it writes: the index,
    each lock the bytes it recorded, then each lock's own bundle checks (plan_bundle). The dry
    run and write_variant_bundle both call it. The index and every variant's files (each once)."""
    from envtool.adapters.install.bundle import plan_bundle, plan_bundle_files
    from envtool.core.shell_quote import quote_posix

    index = read_index(env_dir)
    assert index is not None
    problems = index_problems(env_dir, index)
    if problems:
        raise UsageError(
            problems[0],
            f"re-lock: `envtool lock {quote_posix(name)} --variants {','.join(index.requested)}`",
        )
    files: set[str] = set()
    for v in index.variants:
        files.update(plan_bundle_files(plan_bundle(env_dir / v.lock, out_dir, platforms)[2]))
    return index, sorted(files)


def indexed_variants(env_dir: Path) -> str | None:
    """The `--variants` value the index was locked with ('auto', 'cpu,cuda12.6'); None without
    a readable index (`envtool lock NAME` of a project that has only variant locks)."""
    try:
        index = read_index(env_dir)
    except UsageError:
        return None
    return ",".join(index.requested) if index else None
