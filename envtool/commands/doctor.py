"""`envtool doctor`: say what is wrong with the CUDA stack and how to fix it — verdicts, not a dump.

Probes the host and the target environment concurrently (importing torch in the env dominates),
runs the pure checks in envtool.core.checks, and prints a verdict line, the problems with their
fixes, and a short facts summary. `--record DIR` saves the raw probe outputs; `--replay DIR`
re-runs the checks offline from such a directory (bug reports, tests). The probing, recording and
replay are adapters/host/doctor_probe.py; this module parses flags and renders.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from envtool.commands import env_name, renders, resolve_and_say, say_target, target_data
from envtool.core.checks import (
    Check,
    check_by_id,
    headline,
    overall,
    run_checks,
    run_deep_checks,
)
from envtool.core.facts import EnvFacts, HostFacts
from envtool.core.host_record import render_visible_gpus
from envtool.errors import UsageError
from envtool.output import Result

# --------------------------------------------------------------------------- rendering


def terminal_lines(lines: list[str]) -> list[str]:
    """The report's lines for a terminal. GPU names, driver strings, package fields and probe
    errors are data: their control characters are escaped, and a newline inside one (a
    multi-line stderr, or a crafted name) continues the line indented below it, so data can
    never print a line that looks like a check or the verdict."""
    from envtool.core.shell_quote import printable

    out: list[str] = []
    for line in lines:
        first, *rest = str(line).split("\n")
        indent = " " * (len(first) - len(first.lstrip(" ")) + 4)
        out.append(printable(first))
        out += [indent + printable(part) for part in rest]
    return out


_MARK = {"ok": "✓", "warn": "!", "fail": "✗", "skip": "-"}
_ASCII = {"ok": "ok", "warn": "!", "fail": "X", "skip": "-"}


def _marks() -> dict[str, str]:
    enc = (getattr(sys.stdout, "encoding", None) or "").lower()
    return _MARK if "utf" in enc else _ASCII


def render_facts(host: HostFacts, env: EnvFacts) -> list[str]:
    if host.has_driver:
        drv = f"driver {host.driver_version}"
        if host.driver_cuda:
            drv += f" (CUDA ≤ {host.driver_cuda})"
    else:
        reason = (host.no_driver_reason or "").removeprefix("no NVIDIA driver:").strip()
        drv = "no NVIDIA driver" + (f" ({reason})" if reason else "")
    if host.gpus:
        names: dict[str, int] = {}
        for g in host.gpus:
            label = g.name + (f" sm_{g.capability.replace('.', '')}" if g.capability else "")
            names[label] = names.get(label, 0) + 1
        gpus = ", ".join(f"{n}× {k}" for k, n in names.items())
        if host.nvlink:
            gpus += ", NVLink"
    else:
        gpus = "no GPUs"
    t = env.torch
    if t and t.version:
        torch = f"torch {t.version}"
        torch += f" (CUDA {t.cuda})" if t.cuda else " (CPU build)"
        if t.is_available is not None:
            torch += f", cuda.is_available()={t.is_available}"
    elif env.torch_import_error:
        torch = "torch not importable"
    elif env.status == "timeout":  # stopped or hung: torch may well be there
        torch = "torch not read (the probe did not finish)"
    else:
        torch = "torch not found"
    where = env.python_exe or env.prefix or "?"
    return [f"host: {drv}; {gpus}", f"env:  {where}: {torch}"]


def render_human(
    checks: list[Check], host: HostFacts, env: EnvFacts, verbose: bool, deep: dict | None
) -> list[str]:
    marks = _marks()
    status = overall(checks)
    verdict = headline(checks)
    t = env.torch
    if verdict == "no problems found" and t and t.version and t.cuda and host.gpus:
        verdict += (
            f": torch {t.version} on {render_visible_gpus(host)} (driver {host.driver_version})"
        )
    lines = [f"envtool doctor: {status.upper()} — {verdict}"]
    for c in checks:
        shown = verbose or c.status in ("warn", "fail") or c.id.startswith("deep-")
        if not shown:
            continue
        lines.append(f"  {marks[c.status]} {c.id}: {c.summary}")
        if c.fix and c.status in ("warn", "fail"):
            lines.append(f"      fix: {c.fix}")
        if verbose and c.evidence:
            items = c.evidence.items() if isinstance(c.evidence, dict) else enumerate(c.evidence)
            for k, v in items:
                lines.append(f"      {'' if isinstance(k, int) else f'{k}: '}{v}")
    if deep is not None:
        lines.extend(render_deep(checks))
    lines.extend("  " + x for x in render_facts(host, env))
    return lines


def render_deep(checks: list[Check]) -> list[str]:
    ar = check_by_id(checks, "deep-allreduce")
    if ar is None or not isinstance(ar.evidence, dict) or not ar.evidence.get("busbw_gbps"):
        return []
    ev = ar.evidence
    per = ", ".join(
        f"{k} {v:.1f}" if v >= 10 else f"{k} {v:.2f}" for k, v in ev["busbw_gbps"].items()
    )
    return [f"  all-reduce bus bandwidth (GB/s, {ev.get('world_size')} ranks): {per}"]


def doctor_payload(checks: list[Check], host: HostFacts, env: EnvFacts) -> dict[str, Any]:
    """doctor's --json payload, inside output.py's envelope (version, command, exit_code)."""
    return {
        "status": overall(checks),
        "checks": [c.to_dict() for c in checks],
        "facts": {"host": host.to_dict(), "env": env.to_dict()},
    }


# --------------------------------------------------------------------------- command


def _deep_gpu_count(host: HostFacts, env: EnvFacts) -> int:
    if env.torch and env.torch.device_count is not None:
        return env.torch.device_count
    return len(host.gpus)


@click.command("doctor")
@env_name
@click.option("-p", "--prefix", help="Diagnose the environment at this prefix.")
@click.option("--python", "python_exe", help="Diagnose the environment of this python.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (schema version 1).")
@click.option("--verbose", "-v", is_flag=True, help="Also list passing checks and evidence.")
@click.option("--fast", is_flag=True, help="Do not run the env's python (reads installed files).")
@click.option("--deep", is_flag=True, help="Run GPU matmuls and an NCCL all-reduce in the env.")
@click.option("--deep-cpu", is_flag=True, hidden=True, help="--deep on CPU (gloo), for tests.")
@click.option(
    "--record",
    "record_dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Save raw probe outputs to DIR.",
)
@click.option(
    "--replay",
    "replay_dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Check a recorded DIR offline.",
)
@click.option(
    "--driver", help="Pretend the driver is this version (what-if; CONDA_OVERRIDE-style)."
)
@renders
def cmd(
    name: str | None,
    prefix: str | None,
    python_exe: str | None,
    as_json: bool,
    verbose: bool,
    fast: bool,
    deep: bool,
    deep_cpu: bool,
    record_dir: Path | None,
    replay_dir: Path | None,
    driver: str | None,
) -> Result:
    """Diagnose the CUDA stack of this host and an environment (exit 1 when a check fails)."""
    from envtool.core.versions import parse_version

    if replay_dir and record_dir:
        raise UsageError("--record and --replay exclude each other", "pick one")
    if replay_dir and (deep or deep_cpu):
        raise UsageError("--deep needs the live environment", "drop --deep when using --replay")
    if driver:
        try:
            parse_version(driver)
        except ValueError:
            shown = driver if len(driver) <= 40 else driver[:39] + "…"  # not 5000 digits back
            raise UsageError(
                f"--driver {shown!r}: not a driver version", "use e.g. --driver 535.54.03"
            ) from None

    from envtool.adapters.host import doctor_probe

    deep_result = None
    said: dict[str, Any] | None = None
    if replay_dir:
        host, env = doctor_probe.read_replay(replay_dir, driver)
        deep_result = doctor_probe.read_replay_deep(replay_dir)
    else:
        target = resolve_and_say("doctor", "checking", name, prefix, python_exe)
        said = target_data(target, "checking")
        record: dict[str, str] | None = {} if record_dir else None
        host, env = doctor_probe.probe_facts(target, fast, driver, record)
        if record_dir is not None:
            try:
                doctor_probe.write_record(record_dir, record or {}, host, env)
            except OSError as exc:
                raise UsageError(
                    f"--record {record_dir}: cannot write the recording ({exc.strerror})",
                    "pass a new or writable directory",
                ) from None
        if deep or deep_cpu:
            from envtool.adapters.host.deep import probe_deep
            from envtool.output import note

            say_target()
            note("envtool doctor: running --deep (GPU matmuls, all-reduce) in the environment…")
            deep_result = probe_deep(str(target.python), _deep_gpu_count(host, env), cpu=deep_cpu)
            if record_dir is not None:
                doctor_probe.write_deep_record(record_dir, deep_result)

    checks = run_checks(host, env) + run_deep_checks(deep_result)
    from envtool.adapters.lockfile.variant_lock import doctor_variant_check

    # installed from variant locks: is it still the variant this host would pick? Live only: a
    # recording's install_lock names a path on the machine it came from, not files to read here.
    if not replay_dir and (
        picked := doctor_variant_check(host, env.install_lock, env.name or "NAME")
    ):
        checks.append(picked)  # type: ignore[arg-type]
    text = [] if as_json else terminal_lines(render_human(checks, host, env, verbose, deep_result))
    return Result(
        "doctor",
        {**doctor_payload(checks, host, env), "target": said},
        text,
        exit_code=1 if overall(checks) == "fail" else 0,
    )
