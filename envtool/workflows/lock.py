"""Lock an environment: request → plan → solve (py-rattler) → verify → conda-lock.yml.

The workflow `envtool create` and `envtool lock` share (and `lock --variants`, once per variant:
workflows/variants.py); the command modules only parse flags and render (lock_outcome.summarize_lock).
Writes nothing unless the solution verifies (then atomically, under the project mutex).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from envtool import __version__
from envtool.adapters.locate import project_env_paths, project_root
from envtool.core.facts import HostFacts
from envtool.core.lock_diff import LockDiff
from envtool.core.lockfile import (
    LockContent,
    compute_input_hash,
    plan_custom_metadata,
    solved_torch,
)
from envtool.core.plan import DEFAULT_CHANNELS, NO_CUDA_PLATFORMS, CudaBuild, Plan, Request
from envtool.core.request import render_request_yml, resolved_request, with_file_limits
from envtool.errors import DiagnosedFailure, cannot_write
from envtool.output import note
from envtool.workflows.lock_outcome import LockOutcome

__all__ = ["LockOutcome", "lock_environment", "request_from_yml"]


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
    previous: Path | None = None,
    replaces: str | None = None,
    hold: dict[str, tuple[str, ...]] | None = None,
) -> LockOutcome:
    """Plan -> discover/solve -> verify -> pip -> write environment.yml + conda-lock.yml (atomically).

    `request.conda_specs`/`pip_specs` come from `env_yml_text`; a failed solve or check writes nothing.
    `lock_name`: another file name beside environment.yml (a variant lock: conda-lock.cpu.yml).
    `previous`: the lock the diff compares with (default: the one this writes over).
    `replaces`: the environment.yml text on disk that `env_yml_text` (an edit: add, drop) takes
    the place of; written with the lock, under the mutex, only when the lock is.
    `hold`: per platform, constraints that keep packages at their locked builds (`update PKG`).
    """
    from envtool.adapters.solve.rattler_solve import (
        discover_plan_solve,
        read_channel_identity,
        resolve_channel,
    )
    from envtool.core.plan import check_request, plan_environment
    from envtool.core.verify_solution import verify_solution

    env_dir, yml_path, lock_path = project_env_paths(name, directory)
    base = project_root(env_dir)  # where the request's relative local channels are
    if lock_name:
        lock_path = env_dir / lock_name
    # re-locking a stored plan targets the stored CUDA, not whatever host runs the re-lock
    picks = request.cuda == "auto" or request.cuda.isdigit()  # picked from this host's driver
    host = _probe_host_facts(request) if probe or picks else None
    check_request(request, host)  # refuse impossible requests before touching a channel
    channels = list(request.channels or DEFAULT_CHANNELS[request.flavor])
    # the channel's own torch builds decide which CUDA versions exist (not a table)
    discover = (
        [p for p in request.platforms if p not in NO_CUDA_PLATFORMS] or None
        if request.cuda != "cpu"
        else None
    )
    why = f" ({request.platforms_from})" if request.platforms_from else ""
    note(f"solving {name} for {', '.join(request.platforms)}{why} …")
    listed: list[list[CudaBuild] | None] = [None]  # the channel's builds the last plan saw

    def planner(builds: list[CudaBuild] | None, cuda: str | None) -> Plan:
        """The planner the solver calls again for a suggested --cuda, to check it solves."""
        listed[0] = builds
        planned = with_file_limits(
            plan_environment(replace(request, cuda=cuda) if cuda else request, host, builds),
            request,
        )
        if not hold:
            return planned
        return replace(
            planned,
            platforms=tuple(
                replace(pp, constraints=(*pp.constraints, *hold.get(pp.platform, ())))
                for pp in planned.platforms
            ),
        )

    plan, solved = discover_plan_solve(channels, discover, planner, cache_dir, base)
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
        from envtool.adapters.install.uv_pip import compile_pip

        for pp in plan.platforms:
            glibc = next((v for n, v, _ in pp.virtual_packages if n == "__glibc"), "2.28")
            pip_locked[pp.platform] = compile_pip(
                list(plan.pip_specs), solved[pp.platform], pp.platform, plan.python, glibc
            )
    options = resolved.options()
    identity = read_channel_identity(list(plan.channels), list(request.platforms), base)
    input_hash = compute_input_hash(yml_text, options, identity, __version__)
    outcome = LockOutcome(
        env_dir,
        plan,
        input_hash,
        True,
        False,
        {p: len(v) for p, v in solved.items()},
        {p: len(v) for p, v in pip_locked.items()},
        _diff_against(previous or lock_path, solved, pip_locked),
    )
    if dry_run:
        return outcome
    from envtool.adapters.files import read_text_or_none, write_atomic
    from envtool.adapters.lockfile.lock_io import write_lock
    from envtool.adapters.mutex import hold_project_mutex

    try:
        env_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(env_dir, exc) from None
    # two envtool processes on one environment write one after the other, never interleaved
    with hold_project_mutex(env_dir, name):
        if not write_yml:
            refuse_changed_yml(yml_path, env_yml_text if replaces is None else replaces, name)
        content = LockContent(
            packages=solved,
            pip_packages=pip_locked,
            channels=[resolve_channel(c, base) for c in plan.channels],
            content_hash={pp.platform: input_hash for pp in plan.platforms},
            custom_metadata=plan_custom_metadata(
                plan,
                options,
                input_hash,
                __version__,
                solved_torch(solved),
                yml_text,  # a later create replaces the file only while it is still this one
            ),
            sources=["environment.yml"],
        )
        write_lock(lock_path, content)
        before = read_text_or_none(yml_path)
        if before != yml_text:
            write_atomic(yml_path, yml_text)  # unchanged request: keep file and mtime
            if before is not None and write_yml:  # create's flags made another request
                note(f"note: rewrote {yml_path} from create's flags (the lock diff follows)")
    outcome.written = True
    return outcome


def _diff_against(
    previous: Path, solved: dict[str, list[Any]], pip_locked: dict[str, list[Any]]
) -> LockDiff:
    """The lock diff of this solve against the lock at `previous` (none there, or one envtool
    cannot read: a first lock, everything added)."""
    from envtool.adapters.lockfile.lock_io import read_lock
    from envtool.core.lock_diff import diff_locks, solution_as_lock
    from envtool.errors import UsageError

    old = None
    if previous.is_file():
        try:
            old = read_lock(previous)
        except UsageError as exc:
            note(f"note: {exc.message}; the lock diff lists every package as added")
    return diff_locks(old, solution_as_lock(solved, pip_locked))


def request_from_yml(
    text: str,
    source: str,
    flags: dict[str, Any],
    stored: dict[str, Any] | None = None,
    *,
    file_dir: Path | None = None,
    directory: str | None = None,
) -> Request:
    """Merge: explicit flags > what the file asks for > options stored in the previous lock >
    defaults (core/request.merge_request). The flags are checked first, then every spec is one
    rattler can read (rattler_solve.check_specs), before anything is probed or solved.
    `file_dir`: the folder of a file that is not the project's environment.yml (create -f): its
    relative local channels are read from there and recorded for the project at `directory`."""
    from envtool.adapters.locate import written_channel
    from envtool.adapters.solve.rattler_solve import check_specs
    from envtool.core.inspect import read_ask
    from envtool.core.request import check_flag_values, merge_request
    from envtool.core.spec import parse_environment_yml

    check_flag_values(flags)
    spec = parse_environment_yml(text, source)
    check_specs(spec.dependencies, source)
    if file_dir is not None:  # `./chan` in ~/src/env.yml is ~/src/chan, wherever envtool runs
        spec.channels = [written_channel(c, directory, file_dir) for c in spec.channels]
    # the one reader `envtool inspect` also reports (core/inspect.read_ask)
    ask = read_ask(spec)
    if ask.pip_replaced:
        moved = ", ".join(p.strip() for p in ask.pip_replaced)
        note(
            f"note: {source}: pip {moved} installed from conda instead (the planned torch build; "
            "pip would overwrite it)"
        )
    from envtool.adapters.locate import probe_platform

    request = merge_request(spec, ask, flags, stored, probe_platform())
    if not request.channels:  # none from a flag, the file or the last lock: the settings'
        from envtool.adapters.config import configured_channels

        if configured := configured_channels():  # a settings file's folders are absolute
            recorded = tuple(written_channel(c, directory, as_typed=False) for c in configured)
            request = replace(request, channels=recorded)
    return request


def _probe_host_facts(request: Request) -> HostFacts | None:
    """This host's driver and GPUs, unless --cuda cpu or --driver with --gpu make them irrelevant."""
    if request.cuda == "cpu" or (request.driver and request.gpus):
        return None
    from envtool.adapters.host.host_probe import probe_host

    return probe_host()


def refuse_changed_yml(yml_path: Path, solved_from: str, name: str) -> None:
    """Called holding the project mutex: `lock` read environment.yml before it waited for the
    mutex, and a create (or an edit) may have changed it meanwhile; a lock solved from the old
    text must not land."""
    from envtool.adapters.files import read_text_or_none
    from envtool.core.shell_quote import join_posix

    on_disk = read_text_or_none(yml_path)
    if on_disk is not None and on_disk != solved_from:
        raise DiagnosedFailure(
            f"{yml_path} changed while {name} was being locked; nothing written",
            f"run `{join_posix(['envtool', 'lock', name])}` again",
        )
