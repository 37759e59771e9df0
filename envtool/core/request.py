"""A lock request, pure: flags checked, the request merged from what an environment file asks for
(core/inspect.read_ask) with the flags and the options the last lock stored, the file's version
limits carried into the plan, and the request as recorded (resolved, and rendered back into the
environment.yml `create` writes). workflows/lock.request_from_yml reads the file through these.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from envtool.core.inspect import PLAIN_VERSION
from envtool.core.plan import PLAN_WRITES, Plan, Request, planned_gpus
from envtool.errors import UsageError

if TYPE_CHECKING:
    from envtool.core.inspect import FileAsk
    from envtool.core.spec import EnvSpec


def check_flag_values(flags: dict[str, Any]) -> None:
    """Refuse an empty --cuda/--torch/--python/--flavor and a version flag no version can be."""
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


def choose_platforms(
    flagged: list[str] | None,
    in_file: list[str] | None,
    stored: list[str] | None,
    host: tuple[str, str],
) -> tuple[tuple[str, ...], str]:
    """**The** platforms create and lock solve for, and why (said in the plan): --platform; else
    the file's `platforms:` (conda-lock's key; pixi's manifest platforms); else the ones the last
    lock was solved for; else this host's — `create` installs here, so a linux-aarch64 or macOS
    host gets its own platform, not linux-64. `host` is (platform, where it came from: "this
    host" or "CONDA_SUBDIR", conda's way to ask for another, e.g. osx-64 on Apple silicon)."""
    from envtool.core.plan import PLATFORMS

    for given, why in (
        (flagged, "--platform"),
        (in_file, "environment.yml's platforms:"),
        (stored, "as last locked"),
    ):
        if given:
            return tuple(dict.fromkeys(given)), why
    platform, via = host
    if platform not in PLATFORMS:
        from envtool.core.shell_quote import printable

        shown = printable(platform[:40]) + ("…" if len(platform) > 40 else "")
        what = f"{via}={shown}" if via != "this host" else f"this host is {shown}"
        raise UsageError(
            f"{what}: not a platform envtool plans for ({', '.join(PLATFORMS)})",
            "pass --platform to lock for one of them (with --no-install on this host)"
            if via == "this host"
            else f"unset {via}, or set it to one of them",
        )
    return (platform,), "this host" if via == "this host" else f"this host, by {via}"


def merge_request(
    spec: EnvSpec,
    ask: FileAsk,
    flags: dict[str, Any],
    stored: dict[str, Any] | None,
    host_platform: tuple[str, str] = ("linux-64", "this host"),
) -> Request:
    """Merge: explicit flags > what the file asks for (`ask`, read from `spec`) > options stored
    in the previous lock > defaults (the platform: `host_platform`, core/request.choose_platforms)."""
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
    platforms, platforms_from = choose_platforms(
        flags.get("platforms"), spec.platforms, stored.get("platforms"), host_platform
    )
    channels = flags.get("channels") or spec.channels or stored.get("channels") or []
    return Request(
        conda_specs=tuple(conda),
        pip_specs=tuple(pip),
        cuda=merged["cuda"] or "auto",
        torch=merged["torch"],
        python=merged["python"],
        flavor=merged["flavor"] or "conda-forge",
        platforms=platforms,
        platforms_from=platforms_from,
        channels=tuple(channels),
        driver=flags.get("driver") or stored.get("driver"),
        gpus=tuple(flags.get("gpus") or stored.get("gpus") or ()),
        virtual_overrides=tuple(
            tuple(p)
            for p in (flags.get("virtual_overrides") or stored.get("virtual_overrides") or ())
        ),
    )


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
    from envtool.core.credentials import redact_credentials

    return redact_credentials(render_environment_yml(spec), strip=True)  # a file: no secrets


def dropped_packages(old: EnvSpec, new: EnvSpec) -> list[str]:
    """The packages `old` asks for that `new` does not (conda names, then pip's by their
    normalized names): what replacing one request file with the other would lose. The names the
    plan writes (cuda-version, cpuonly, python's pin, pip for a pip section: PLAN_WRITES) are
    the plan's, not the user's to lose."""
    from envtool.core.spec import normalize_pip_name, pip_line_name

    conda = {d.name.lower() for d in new.dependencies} | PLAN_WRITES
    old_pip = [n for n in map(pip_line_name, old.pip_lines()) if n]  # `name @ URL` too
    pip = {normalize_pip_name(n) for n in map(pip_line_name, new.pip_lines()) if n}
    lost = [d.name for d in old.dependencies if d.name.lower() not in conda]
    lost += [f"{n} (pip)" for n in old_pip if normalize_pip_name(n) not in pip]
    return list(dict.fromkeys(lost))


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
        if s.version and s.version != "*" and not PLAIN_VERSION.match(s.version):
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
