"""Lock an environment: request → plan → solve (py-rattler) → verify → conda-lock.yml.

The work `envtool create` and `envtool lock` share; the two command modules only parse flags
and render. Writes nothing unless the solution verifies (then atomically).
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envtool import __version__
from envtool.adapters.locate import project_env_paths
from envtool.core.facts import HostFacts
from envtool.core.lockfile import compute_input_hash, parse_lock_stamp, plan_custom_metadata
from envtool.core.plan import (
    DEFAULT_CHANNELS,
    NO_CUDA_PLATFORMS,
    CudaBuild,
    Plan,
    Request,
    planned_gpus,
    render_plan,
)
from envtool.errors import DiagnosedFailure, UsageError, cannot_write
from envtool.output import Result, note

if TYPE_CHECKING:
    from envtool.core.spec import CondaSpec

DEFAULT_PROFILE = "pytorch"
_PLAIN_VERSION = re.compile(r"^(==?)?(\d+(?:\.\d+)*)(\.\*)?$")


@dataclass
class LockOutcome:
    env_dir: Path
    plan: Plan | None
    input_hash: str
    changed: bool  # False: inputs unchanged, nothing solved or written
    written: bool
    packages: dict[str, int]  # platform -> conda package count
    pip: dict[str, int]


def profiles_dir() -> Path:
    """Shipped profiles: envtool/_data/environments in a wheel, else the repo's environments/."""
    from importlib import resources

    packaged = resources.files("envtool").joinpath("_data", "environments")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "environments"


def read_profile(name: str) -> tuple[str, str]:
    base = profiles_dir()
    path = base / name / "environment.yml"
    if not path.is_file():
        known = (
            sorted(p.name for p in base.iterdir() if (p / "environment.yml").is_file())
            if base.is_dir()
            else []
        )
        raise UsageError(
            f"--profile {name}: no such profile",
            f"use one of {', '.join(known) or '(none shipped)'}",
        )
    from envtool.adapters.files import ENV_FILE_LIMIT, read_text

    return read_text(path, ENV_FILE_LIMIT, what="environment file"), str(path)


def probe_host_facts(request: Request) -> HostFacts | None:
    """This host's driver and GPUs, unless --cuda cpu or --driver with --gpu make them irrelevant."""
    if request.cuda == "cpu" or (request.driver and request.gpus):
        return None
    from envtool.adapters.host_probe import probe_host

    return probe_host()


def lock_environment(
    name: str,
    env_yml_text: str,
    source: str,
    request: Request,
    directory: str | None,
    *,
    write_yml: bool = True,
    probe: bool = True,
    dry_run: bool = False,
    cache_dir: Path | None = None,
    lock_name: str | None = None,
) -> LockOutcome:
    """Plan -> discover/solve -> verify -> pip -> write environment.yml + conda-lock.yml (atomically).

    `request.conda_specs`/`pip_specs` come from `env_yml_text`; a failed solve or check writes nothing.
    `lock_name`: another file name beside environment.yml (a variant lock: conda-lock.cpu.yml).
    """
    from envtool.adapters.rattler_solve import discover_plan_solve, read_channel_identity
    from envtool.core.plan import check_request, plan_environment
    from envtool.core.verify_solution import verify_solution

    env_dir, yml_path, lock_path = project_env_paths(name, directory)
    if lock_name:
        lock_path = env_dir / lock_name
    # re-locking a stored plan targets the stored CUDA, not whatever host runs the re-lock
    picks = request.cuda == "auto" or request.cuda.isdigit()  # picked from this host's driver
    host = probe_host_facts(request) if probe or picks else None
    check_request(request, host)  # refuse impossible requests before touching a channel
    channels = list(request.channels or DEFAULT_CHANNELS[request.flavor])
    # the channel's own torch builds decide which CUDA versions exist (not a table)
    discover = (
        [p for p in request.platforms if p not in NO_CUDA_PLATFORMS] or None
        if request.cuda != "cpu"
        else None
    )
    if not dry_run:
        from envtool.adapters.lock_io import preload_lock_writer

        preload_lock_writer()
    note(f"solving {name} for {', '.join(request.platforms)} …")
    listed: list[list[CudaBuild] | None] = [None]  # the channel's builds the last plan saw

    def planner(builds: list[CudaBuild] | None, cuda: str | None) -> Plan:
        """The planner the solver calls again for a suggested --cuda, to check it solves."""
        listed[0] = builds
        return with_file_limits(
            plan_environment(replace(request, cuda=cuda) if cuda else request, host, builds),
            request,
        )

    plan, solved = discover_plan_solve(channels, discover, planner, cache_dir)
    for w in plan.warnings:
        note(f"warning: {w}")
    for n in plan.notes:
        note(f"note: {n}")
    problems = [
        p
        for pp in plan.platforms
        for p in verify_solution(
            pp,
            solved[pp.platform],
            gpus=plan.gpus,
            driver=plan.driver,
            flavor=plan.flavor,
            available=None if listed[0] is None else {b.cuda for b in listed[0] if b.cuda},
        )
    ]
    if problems:
        raise DiagnosedFailure(
            "the solution is not what the plan asked for, nothing written: "
            + "; ".join(f"{p.platform}: {p.message}" for p in problems),
            next(
                (p.hint for p in problems if p.hint),
                "pin the CUDA runtime packages (cuda-version=X.Y), or pick another --cuda/--torch",
            ),
        )
    resolved = resolved_request(request, plan)
    # create writes the request file; lock leaves the user's file (and its comments) alone
    yml_text = (
        render_request_yml(name, env_yml_text, source, plan, resolved)
        if write_yml
        else env_yml_text
    )
    pip_locked: dict[str, list[Any]] = {}
    if plan.pip_specs:
        from envtool.adapters.uv_pip import compile_pip

        for pp in plan.platforms:
            glibc = next((v for n, v, _ in pp.virtual_packages if n == "__glibc"), "2.28")
            pip_locked[pp.platform] = compile_pip(
                list(plan.pip_specs), solved[pp.platform], pp.platform, plan.python, glibc
            )
    options = resolved.options()
    identity = read_channel_identity(list(plan.channels), list(request.platforms))
    input_hash = compute_input_hash(yml_text, options, identity, __version__)
    outcome = LockOutcome(
        env_dir,
        plan,
        input_hash,
        True,
        False,
        {p: len(v) for p, v in solved.items()},
        {p: len(v) for p, v in pip_locked.items()},
    )
    if dry_run:
        return outcome
    from envtool.adapters.lock_io import write_lock, write_text_atomic

    try:
        env_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(env_dir, exc) from None
    # two envtool processes on one environment write one after the other, never interleaved
    with hold_project_lock(env_dir, name):
        from envtool.core.shell_quote import join_posix

        # `lock` read environment.yml before it waited for this lock: a create (or an edit)
        # may have changed it meanwhile, and a lock solved from the old text must not land
        on_disk = None if write_yml else _read_or_none(yml_path)
        if on_disk is not None and on_disk != env_yml_text:
            raise DiagnosedFailure(
                f"{yml_path} changed while {name} was being locked; nothing written",
                f"run `{join_posix(['envtool', 'lock', name])}` again",
            )
        write_lock(
            lock_path,
            solved,
            pip_locked,
            [resolve_for_lock(c) for c in plan.channels],
            {pp.platform: input_hash for pp in plan.platforms},
            plan_custom_metadata(plan, options, input_hash, __version__, solved_torch(solved)),
            ["environment.yml"],
        )
        if _read_or_none(yml_path) != yml_text:
            write_text_atomic(yml_path, yml_text)  # unchanged request: keep file and mtime
    outcome.written = True
    return outcome


def write_lock_path(env_dir: Path) -> str:
    """A lock file outside the project (so users never commit it), one per environment folder,
    in the user's cache (not a shared /tmp another user could pre-create)."""
    import hashlib

    from envtool.adapters.installer import default_cache_dir

    key = hashlib.sha256(str(env_dir.resolve()).encode()).hexdigest()[:16]
    return str(default_cache_dir() / "locks" / f"project-{key}.lock")


def hold_project_lock(env_dir: Path, label: str) -> AbstractContextManager[None]:
    """environments/NAME/ of a project, locked: `lock` holds it while writing, `create` and
    `install NAME` across lock-write/read + install. Always taken before the env (prefix) lock,
    never after, so the two cannot deadlock."""
    from envtool.adapters.install_state import hold_file_lock

    return hold_file_lock(Path(write_lock_path(env_dir)), label, on_wait=note)


def solved_torch(solved: dict[str, list[Any]]) -> str:
    """The pytorch version(s) the solve chose, e.g. '2.7.1' (or '2.7.1 linux-64, 2.7.0 win-64')."""
    found = {
        p: next((r.version for r in recs if r.name == "pytorch"), "") for p, recs in solved.items()
    }
    versions = sorted(set(found.values()))
    if len(versions) == 1:
        return versions[0]
    return ", ".join(f"{v} {p}" for p, v in sorted(found.items()))


def absolute_channel(channel: str) -> str:
    """A local channel folder given relative to the current directory -> an absolute path, so the
    stored request still points at it when `envtool lock` runs from elsewhere."""
    if "://" not in channel and (
        channel.startswith((".", "~")) or Path(channel).expanduser().is_dir()
    ):
        return str(Path(channel).expanduser().resolve())
    return channel


def resolve_for_lock(channel: str) -> str:
    from envtool.adapters.rattler_solve import resolve_channel

    return resolve_channel(channel)


def resolved_request(request: Request, plan: Plan) -> Request:
    """The request as re-locked later: `auto` replaced by the CUDA it resolved to on this host, so
    `envtool lock` on another machine (or no GPU) re-solves the same target; the GPUs the plan was
    made for (--gpu or probed) recorded as distinct compute capabilities, so that target keeps its
    `__cuda_arch` (and arch check) on a login node. Recorded this way, the input hash changes with
    the GPUs only when the plan does: a different lowest/extra capability, not a GPU count, a
    spelling (sm_90 / 9.0) or any GPU of a CPU plan."""
    any_cuda = any(p.cuda for p in plan.platforms)
    return replace(
        request,
        cuda=plan.cuda if any_cuda and plan.cuda else "cpu",
        channels=tuple(plan.channels),
        gpus=planned_gpus(plan) if any_cuda else (),
    )


def render_request_yml(name: str, text: str, source: str, plan: Plan, request: Request) -> str:
    """environment.yml for environments/NAME: the user's specs plus the plan's CUDA-forcing specs
    (of the first CUDA platform), so plain `conda env create -f` asks for the same build."""
    from envtool.core.spec import parse_conda_spec, parse_environment_yml, render_environment_yml

    spec = parse_environment_yml(text, source)
    primary = next((p for p in plan.platforms if p.cuda), plan.platforms[0])
    spec.name = name
    spec.channels = list(plan.channels)
    kept = [s for s in file_limits(request.conda_specs) if s not in primary.specs]
    spec.dependencies = [parse_conda_spec(s) for s in [*primary.specs, *kept]]
    spec.prefix = None
    # the pip torch wheels the plan installs from conda are gone from the pip section
    spec.has_pip_section = spec.has_pip_section and (bool(request.pip_specs) or len(spec.pip) == 0)
    spec.pip = list(request.pip_specs)
    spec.platforms = list(request.platforms) if list(request.platforms) != ["linux-64"] else []
    return render_environment_yml(spec)


def file_limits(conda_specs: tuple[str, ...] | list[str]) -> list[str]:
    """The file's version limits that are not plain pins (`pytorch>=2.8`, `cuda-version<13`,
    `python>=3.10`): a plain pin becomes --torch/--cuda/--python, a limit has no flag, and the
    plan replaces the specs of the names it owns (pytorch, cuda-version, …), so these are
    carried into the solve as constraints (with_file_limits) instead of being dropped."""
    from envtool.core.spec import parse_conda_spec

    out = []
    for text in conda_specs:
        try:
            s = parse_conda_spec(text)
        except ValueError:
            continue
        if s.version and s.version != "*" and not _PLAIN_VERSION.match(s.version):
            out.append(text)
    return out


def with_file_limits(plan: Plan, request: Request) -> Plan:
    """`plan` with the request file's version limits the plan replaced added to each platform's
    constraints: the solve then honours them, or fails saying which package cannot satisfy them."""
    limits = file_limits(request.conda_specs)
    if not limits:
        return plan
    platforms = tuple(
        replace(
            pp,
            constraints=(
                *pp.constraints,
                *(s for s in limits if s not in pp.specs and s not in pp.constraints),
            ),
        )
        for pp in plan.platforms
    )
    return replace(plan, platforms=platforms)


def check_specs(specs: list[CondaSpec], source: str) -> None:
    """Refuse, before any probing or solving, a spec the solver cannot read (`pytorch=>>2`):
    one line naming the file and the spec as written (the plan would otherwise drop it)."""
    import rattler

    for spec in specs:
        try:
            rattler.MatchSpec(spec.render(), strict=False)
        except Exception as exc:  # rattler's InvalidMatchSpecError
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise UsageError(
                f"{source}: {(spec.raw or spec.render())!r} is not a valid conda spec ({reason})",
                "use conda's form `name`, `name=1.2`, `name>=1.2,<2` or `channel::name=1.2`",
            ) from None


def request_from_yml(
    text: str, source: str, flags: dict[str, Any], stored: dict[str, Any] | None = None
) -> Request:
    """Merge: explicit flags > what the file asks for > options stored in the previous lock > defaults."""
    from envtool.core.inspect import read_ask
    from envtool.core.spec import parse_environment_yml

    for key in ("cuda", "torch", "python", "flavor"):
        if flags.get(key) is not None and not str(flags[key]).strip():
            # an empty value is not "auto" (--cuda '' from an unset shell variable)
            raise UsageError(
                f"--{key} '': empty", f"pass a value, or leave --{key} out for the default"
            )
    for key in ("cuda", "torch", "python", "driver"):
        value = str(flags.get(key) or "")
        if len(value) > 64 or any(len(p) > 16 for p in re.findall(r"\w+", value)):
            # no version has a 5000-digit part: refused before anything compares it, and the
            # value is not echoed whole
            example = {"cuda": "12.4", "torch": "2.7", "python": "3.11", "driver": "550.54.14"}
            raise UsageError(
                f"--{key} {value[:24]}…: not a version", f"e.g. --{key} {example[key]}"
            )
    spec = parse_environment_yml(text, source)
    check_specs(spec.dependencies, source)
    # the one reader `envtool inspect` also reports (core/inspect.read_ask)
    ask = read_ask(spec)
    conda = [d.render() for d in spec.dependencies] + list(ask.conda_added)
    pip = [p for p in spec.pip if p not in ask.pip_replaced]
    inferred = {
        "cuda": None if ask.cuda == "auto" else ask.cuda,
        "torch": ask.torch,
        "python": ask.python,
        "flavor": ask.flavor,
    }
    stored = stored or {}
    merged: dict[str, Any] = {}
    for key in ("cuda", "torch", "python", "flavor"):
        merged[key] = flags.get(key) or inferred.get(key) or stored.get(key)
    # a major in the file (`cuda-version=12`) was resolved by the last lock: keep that X.Y, as for
    # auto, so a re-lock on another host (a login node) keeps the target
    asked, kept = inferred.get("cuda") or "", str(stored.get("cuda") or "")
    if not flags.get("cuda") and asked.isdigit() and kept.startswith(asked + "."):
        merged["cuda"] = kept
    if ask.pip_replaced:
        moved = ", ".join(p.strip() for p in ask.pip_replaced)
        note(
            f"note: {source}: pip {moved} installed from conda instead (the planned torch build; "
            "pip would overwrite it)"
        )
    platforms = flags.get("platforms") or spec.platforms or stored.get("platforms") or ["linux-64"]
    channels = flags.get("channels") or spec.channels or stored.get("channels") or []
    return Request(
        conda_specs=tuple(conda),
        pip_specs=tuple(pip),
        cuda=merged["cuda"] or "auto",
        torch=merged["torch"],
        python=merged["python"],
        flavor=merged["flavor"] or "conda-forge",
        platforms=tuple(dict.fromkeys(platforms)),
        channels=tuple(channels),
        driver=flags.get("driver") or stored.get("driver"),
        gpus=tuple(flags.get("gpus") or stored.get("gpus") or ()),
        virtual_overrides=tuple(
            tuple(p)
            for p in (flags.get("virtual_overrides") or stored.get("virtual_overrides") or ())
        ),
    )


def parse_virtual_overrides(values: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for v in values:
        name, sep, ver = v.partition("=")
        if not sep or not name.startswith("__") or not ver:
            raise UsageError(
                f"--virtual-package {v}: expected NAME=VER", "e.g. --virtual-package __glibc=2.17"
            )
        out.append((name, ver))
    return out


def summarize(outcome: LockOutcome, name: str, command: str, dry_run: bool) -> Result:
    plan = outcome.plan
    data: dict[str, Any] = {
        "name": name,
        "env_dir": str(outcome.env_dir),
        "changed": outcome.changed,
        "written": outcome.written,
        "dry_run": dry_run,
        "input_hash": outcome.input_hash,
        "packages": outcome.packages,
        "pip_packages": outcome.pip,
        "plan": plan.to_dict() if plan else None,
    }
    text = render_plan(plan) if plan else []
    if not outcome.changed:
        text.append(f"{name}: lock is up to date ({outcome.env_dir / 'conda-lock.yml'})")
    else:
        counts = ", ".join(f"{p}: {n} packages" for p, n in outcome.packages.items())
        solved = f" ({counts})" if counts else ""
        if not outcome.written:
            text.append(f"dry run: nothing written{solved}")
        elif command == "lock":  # lock re-solves the request; it never rewrites environment.yml
            text.append(f"wrote {outcome.env_dir / 'conda-lock.yml'}{solved}")
        else:
            text.append(f"wrote {outcome.env_dir / 'environment.yml'} and conda-lock.yml{solved}")
    return Result(command, data, text)


def stored_lock_options(lock_path: Path) -> tuple[str | None, dict[str, Any] | None]:
    """(input hash, stored plan options) from a lock, found without a YAML parser (fast no-op)."""
    from envtool.adapters.files import LOCK_FILE_LIMIT
    from envtool.core.lockfile import parse_lock_options

    text = _read_or_none(lock_path, LOCK_FILE_LIMIT)
    if text is None:
        return None, None
    return parse_lock_stamp(text), parse_lock_options(text)


def _read_or_none(path: Path, limit: int | None = None) -> str | None:
    """A project file's text; None when it is missing or unreadable as text (a FIFO or a device
    there must not hang or fill memory: it is treated as absent, and the atomic writer refuses to
    replace it)."""
    from envtool.adapters.files import ENV_FILE_LIMIT, read_text

    try:
        return read_text(path, limit or ENV_FILE_LIMIT)
    except UsageError:
        return None
