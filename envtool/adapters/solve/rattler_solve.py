"""py-rattler 0.28 behind one call: discover torch builds, plan, solve every platform.

One event loop per command: `discover_plan_solve` runs a single `asyncio.run`, in which the
channel listing, the (pure, synchronous) planner and every platform's solve happen, and the loop
yields briefly before it closes (rattler can crash the interpreter at exit otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from envtool.core.credentials import redact_credentials
from envtool.core.lockfile import SolvedPackage
from envtool.core.shell_quote import printable
from envtool.errors import DiagnosedFailure, UsageError, fit_words

if TYPE_CHECKING:  # annotations only: rattler is imported where a solve runs, core/plan where
    # a plan is used (the no-op lock reads read_channel_identity from here without either)
    from rattler import RepoDataRecord

    from envtool.core.plan import CudaBuild, Plan, PlatformPlan
    from envtool.core.spec import CondaSpec


def resolve_channel(text: str, base: str | Path | None = None) -> str:
    """A channel name -> https://conda.anaconda.org/NAME; a local folder -> file:// URL (a
    relative one read from `base`: locate.local_channel); URLs as is, less any credentials
    (rattler sends none from a URL: they come from its auth store, by host; and a URL with them
    would reach the lock, conda-meta and the terminal)."""
    from envtool.adapters.locate import local_channel

    if "://" in text:
        return redact_credentials(text.rstrip("/"), strip=True)
    path = local_channel(text, base)
    if path is None:
        return f"https://conda.anaconda.org/{text}"
    if not path.is_dir():
        shown = "" if text == str(path) else f" ({printable(str(path))})"
        raise UsageError(  # from --channel or environment.yml's channels: name neither
            f"channel {printable(text)}: no such directory{shown}",
            "pass a conda channel folder (a relative one in environments/NAME/environment.yml "
            "or envtool.toml is read from the project folder, one in a -f file from that "
            "file's folder, one given as --channel from the current folder)",
        )
    return path.as_uri()


SolveResult = dict[str, list[SolvedPackage]]


if TYPE_CHECKING:
    Planner = Callable[[list[CudaBuild] | None, str | None], Plan]


def discover_plan_solve(
    channels: list[str],
    discover_platforms: list[str] | None,
    planner: Planner,
    cache_dir: Path | None = None,
    base: Path | None = None,
) -> tuple[Plan, SolveResult]:
    """`base`: the folder relative local channels are read from (resolve_channel).

    List the channels' pytorch builds (when `discover_platforms`), call `planner(builds, None)`,
    then solve each platform of the plan. Raises UsageError for an unsolvable request.

    A CUDA version counts as built only when the request solves with it: a picked CUDA (auto, a
    major) that does not solve is dropped and the plan made again, and the --cuda a refusal
    suggests is solved (`planner(builds, cuda)`) before the user is told to pass it."""
    import asyncio

    from envtool.adapters.solve.network import bounded_repodata

    session = _session(channels, discover_platforms, planner, cache_dir, base)
    return asyncio.run(bounded_repodata(session, channels, cache_dir))


def solve_platforms(channels: list[str], platform_plans: list[PlatformPlan]) -> SolveResult:
    """Solve given platform plans as they are (no planning, no checks): tests and benchmarks use it
    to show what a solver does with specs envtool would never write."""
    import asyncio

    async def run() -> SolveResult:

        from envtool.adapters.solve.network import gateway as make_gateway

        try:
            gateway = make_gateway()
            urls = [resolve_channel(c) for c in channels]
            return {pp.platform: await _solve_one(gateway, urls, pp) for pp in platform_plans}
        finally:
            await asyncio.sleep(0.05)

    from envtool.adapters.solve.network import bounded_repodata

    return asyncio.run(bounded_repodata(run(), channels))


async def _session(
    channels: list[str],
    discover_platforms: list[str] | None,
    planner: Planner,
    cache_dir: Path | None,
    base: Path | None = None,
) -> tuple[Plan, SolveResult]:
    import asyncio

    from envtool.core.plan import Refusal

    try:
        from envtool.adapters.solve.network import gateway as make_gateway

        # rattler's client: a 503 or a reset on repodata is retried, credentials and mirrors apply
        gateway = make_gateway(cache_dir)
        builds = None
        if discover_platforms:
            try:
                builds = await _discover(gateway, channels, discover_platforms, base)
            # offline or a channel named wrong: a refusal needs no channel, say it first
            except (UsageError, DiagnosedFailure) as unreadable:
                _raise_offline_refusal(planner, unreadable)
                raise

        async def solve(plan: Plan) -> SolveResult:
            urls = [resolve_channel(c, base) for c in plan.channels]
            return {pp.platform: await _solve_one(gateway, urls, pp) for pp in plan.platforms}

        unsolvable: list[str] = []  # CUDA versions whose builds do not solve with this request
        first_failure: UsageError | None = None
        while True:
            usable = None if builds is None else [b for b in builds if b.cuda not in unsolvable]
            try:
                plan = planner(usable, None)
            except Refusal as refusal:
                # the --cuda the hint names must solve: an upgrade's alternative is the CPU build
                flag = refusal.suggestion.flag or "--cuda cpu"
                cuda = flag.split()[-1]
                try:
                    await solve(planner(usable, cuda))
                except MissingPackage:
                    raise
                except UsageError:
                    if cuda != "cpu" and builds is not None:
                        unsolvable.append(cuda)
                        continue
                    raise UsageError(
                        _with_unsolvable(refusal.message, unsolvable),
                        refusal.suggestion.upgrade()
                        if refusal.suggestion.kind == "driver"
                        else "update the NVIDIA driver, or relax the request",
                    ) from None
                raise UsageError(
                    _with_unsolvable(refusal.message, unsolvable), refusal.hint
                ) from None
            except UsageError:
                if first_failure is not None:  # every picked CUDA failed to solve
                    raise _no_cuda_solves(first_failure, unsolvable) from None
                raise
            try:
                solved = await solve(plan)
            except MissingPackage:
                raise
            except UsageError as exc:
                if not plan.picked or plan.cuda is None or builds is None:
                    raise
                first_failure = first_failure or exc
                unsolvable.append(plan.cuda)
                continue
            if unsolvable:
                plan = replace(
                    plan,
                    notes=(
                        *plan.notes,
                        f"CUDA {', '.join(unsolvable)} builds do not solve with this request "
                        f"on {', '.join(plan.channels)}: planned CUDA {plan.cuda or 'cpu'}",
                    ),
                )
            return plan, solved
    finally:
        await asyncio.sleep(0.05)  # let rattler's background tasks finish before the loop closes


def _raise_offline_refusal(planner: Planner, unreadable: UsageError | DiagnosedFailure) -> None:
    """A request refused without channel data (a driver too old for --cuda X.Y or for the GPU) is
    refused as such when the channels cannot be read; no --cuda is suggested (none could be
    checked)."""
    from envtool.core.plan import Refusal

    try:
        planner(None, None)
    except Refusal as refusal:
        s = refusal.suggestion
        fix = s.upgrade() if s.kind == "driver" and s.driver else "update the NVIDIA driver"
        raise UsageError(
            refusal.message,
            f"{fix} (no --cuda to suggest: the channels could not be read — {unreadable.message})",
        ) from None
    except UsageError:
        pass


def _with_unsolvable(message: str, unsolvable: list[str]) -> str:
    if not unsolvable:
        return message
    return f"{message}; CUDA {', '.join(unsolvable)} builds do not solve with this request"


def _no_cuda_solves(first: UsageError, tried: list[str]) -> UsageError:
    """Every CUDA build the driver runs failed to solve: the first solver error, and the way out."""
    return UsageError(
        first.message,
        f"no CUDA build ({', '.join(tried)}) solves with this request: pass --cuda cpu, relax a "
        "pin, or add a channel",
        first.detail,
    )


async def _discover(
    gateway, channels: list[str], platforms: list[str], base: Path | None = None
) -> list[CudaBuild]:
    """pytorch builds of the first channel that has any: with strict channel priority (rattler's
    default) the solver never looks further for pytorch."""
    import rattler

    urls = [resolve_channel(c, base) for c in channels]
    rows: dict[tuple[str, str], list[tuple[str, str, list[str]]]] = {}
    try:
        for platform in platforms:
            result = await gateway.query(
                [rattler.Channel(u) for u in urls],
                [platform, "noarch"],
                ["pytorch"],
                recursive=False,
            )
            for records in result:
                for r in records:
                    key = (platform, str(r.channel or "").rstrip("/"))
                    rows.setdefault(key, []).append((str(r.version), str(r.build), list(r.depends)))
    except Exception as exc:
        _raise_channel_error(exc, ", ".join(platforms))
        raise
    builds: list[CudaBuild] = []
    for platform in platforms:
        # strict channel priority: the first channel with pytorch is the only one the solver uses
        first = next((u for u in urls if rows.get((platform, u.rstrip("/")))), None)
        if first is not None:
            from envtool.core.plan import parse_cuda_builds

            builds += parse_cuda_builds(rows[(platform, first.rstrip("/"))], platform)
    return builds


MIRROR_HINT = (
    "offline or behind a firewall: point the channel at a mirror in "
    "~/.config/rattler/config.toml ([mirrors], docs/network.md), or --channel a local channel "
    "folder"
)


def _raise_channel_error(exc: Exception, platform: str) -> None:
    """rattler's error chain ("Request failed after 3 retries Caused by: … dns error …") as one
    line a user acts on: a host that cannot be reached is named with the cause found by asking
    it (DNS, connect; exit 1: the network, not the command); anything else (a 404, a folder
    with no repodata) is the channel named wrong (exit 2)."""
    if type(exc).__name__ not in (
        "GatewayError",
        "FetchRepoDataError",
        "IoError",
        "InvalidChannelError",
    ):
        return
    import re

    from envtool.adapters.solve.network import describe_unreachable

    text = str(exc)
    uncached = re.search(r"no usable repodata cache for (\S+)", text)
    if uncached:  # --offline and this channel's repodata was never fetched here
        where = printable(redact_credentials(uncached.group(1).rstrip("/")))
        raise UsageError(
            f"--offline: no cached repodata for {where}",
            "run the command once online (the channels' repodata is cached for the next "
            "offline solve), or --channel a local channel folder",
        ) from None
    url = re.search(r"url \((https?://[^)\s]+)\)", text)
    cause = describe_unreachable(url.group(1)) if url else None
    if cause:
        raise DiagnosedFailure(
            f"cannot reach the channel for {platform}: {cause} (after rattler's retries)",
            MIRROR_HINT + "; solved here before: `envtool --offline …` reads the cached repodata",
        ) from None
    raise UsageError(
        f"cannot read channel repodata for {platform}: {one_line(text, 300)}",
        "check --channel (name, URL or a folder with <subdir>/repodata.json); " + MIRROR_HINT,
    ) from None


async def _solve_one(gateway, channel_urls: list[str], pp: PlatformPlan) -> list[SolvedPackage]:
    import rattler
    from rattler.exceptions import SolverError

    vps = [
        rattler.GenericVirtualPackage(
            rattler.PackageName(n), rattler.Version(v), rattler.BuildString(b)
        )
        for n, v, b in pp.virtual_packages
    ]
    try:
        specs = [rattler.MatchSpec(s, strict=False) for s in pp.specs]
        constraints = [rattler.MatchSpec(s, strict=False) for s in pp.constraints]
    except Exception as exc:  # rattler raises its own InvalidMatchSpecError
        raise UsageError(f"bad package spec: {exc}", "fix the spec in environment.yml") from None
    try:
        records = await rattler.solve(
            [rattler.Channel(u) for u in channel_urls],
            specs,
            gateway=gateway,
            platforms=[pp.platform, "noarch"],
            virtual_packages=vps,
            constraints=constraints,
        )
    except SolverError as exc:
        lead, tree = solver_explanation(str(exc))
        missing = _missing_asked_package(str(exc), specs)
        if missing is not None:  # no --cuda changes that: said as the package it is
            where = ", ".join(redact_credentials(u.rstrip("/")) for u in channel_urls)
            raise MissingPackage(
                f"no solution for {pp.platform}: no {missing} package in {printable(where)}",
                f"the request asks for {missing}: drop it (from the -f file, or pick another "
                "--profile), or add a --channel that has it",
            ) from None
        raise UsageError(
            f"no solution for {pp.platform}: {lead}" + (" (why, below)" if tree else ""),
            "relax a pin, pick another --cuda/--torch/--python, or add a channel",
            tree,
        ) from None
    except Exception as exc:  # missing channel, unreadable repodata
        _raise_channel_error(exc, pp.platform)
        raise
    return sorted((to_solved(r, pp.platform) for r in records), key=lambda p: p.name)


class MissingPackage(UsageError):
    """A package the request names that no channel has for the platform: no CUDA build solves
    it either, so the solve loop tries no other --cuda."""


def _missing_asked_package(text: str, specs: list) -> str | None:
    """rattler's "No candidates were found for NAME …" about a package the request itself asks
    for (not a dependency, not a name the plan owns: a missing cuda-version is a CUDA matter)."""
    import re

    from envtool.core.plan import PLAN_OWNED

    # "NAME *" (maybe "[channel=…]"): no record of NAME at all; "NAME 3.12.*" is a version
    # the channels lack, which the generic "relax a pin" answers
    m = re.search(
        r"No candidates were found for ([A-Za-z0-9_.-]+) \*(?:\[[^\]\n]*\])?\.?\s*$", text, re.M
    )
    if m is None:
        return None
    asked = {s.name.normalized for s in specs if s.name is not None}
    name = m.group(1).lower()
    return name if name in asked and name not in PLAN_OWNED else None


def to_solved(record: RepoDataRecord, platform: str) -> SolvedPackage:
    """One rattler RepoDataRecord in plain types (public: tests that solve with rattler directly,
    for the raw records, write their locks through lock_io.write_lock with it)."""
    return SolvedPackage(
        name=record.name.normalized,
        version=str(record.version),
        build=str(record.build),
        platform=platform,
        subdir=record.subdir,
        url=str(record.url),
        channel=str(record.channel or ""),
        md5=record.md5.hex() if record.md5 else None,
        sha256=record.sha256.hex() if record.sha256 else None,
        depends=tuple(record.depends),
    )


def solver_explanation(text: str) -> tuple[str, str | None]:
    """rattler's SolverError text -> (its first line, the indented tree under it, or None).

    The tree keeps its glyphs and indentation (├─ └─ │): it is printed as it is, under the error
    line, not squashed onto that line and cut."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "the solver gave no reason", None
    lead = lines[0].removeprefix("Cannot solve the request because of: ").rstrip(":").strip()
    return lead, "\n".join(lines[1:]) or None


def one_line(text: str, limit: int = 600) -> str:
    """A tool's multi-line error as one line of at most `limit` characters."""
    return fit_words(" ".join(line.strip() for line in text.splitlines() if line.strip()), limit)


def read_channel_identity(
    channels: list[str], platforms: list[str], base: Path | None = None
) -> list[str]:
    """What a channel holds, cheaply: local repodata.json size+mtime per subdir; remote channels
    by URL only (a remote channel's new packages are picked up by `envtool lock --force`)."""
    out: list[str] = []
    for c in channels:
        url = resolve_channel(c, base)
        if not url.startswith("file://"):
            out.append(url)
            continue
        root = Path(unquote(url[len("file://") :]))
        for subdir in [*sorted(platforms), "noarch"]:
            f = root / subdir / "repodata.json"
            try:
                st = f.stat()
                out.append(f"{url}/{subdir} {st.st_size} {st.st_mtime_ns}")
            except OSError:
                out.append(f"{url}/{subdir} missing")
    return out


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
