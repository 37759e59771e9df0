"""`envtool doctor`: say what is wrong with the CUDA stack and how to fix it — verdicts, not a dump.

Probes the host and the target environment concurrently (importing torch in the env dominates),
runs the pure checks in envtool.core.checks, and prints a verdict line, the problems with their
fixes, and a short facts summary. `--record DIR` saves the raw probe outputs; `--replay DIR`
re-runs the checks offline from such a directory (bug reports, tests).
"""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envtool.commands import renders
from envtool.core.checks import (
    Check,
    check_by_id,
    headline,
    overall,
    run_checks,
    run_deep_checks,
)
from envtool.core.facts import EnvFacts, HostFacts
from envtool.errors import UsageError
from envtool.output import Result

if TYPE_CHECKING:
    from envtool.adapters.locate import Target

HOST_DIR = "host"  # DIR/host/<raw probe outputs, one file each>
ENV_FILE = "env.json"  # DIR/env.json: EnvFacts.to_dict()
DEEP_FILE = "deep.json"
COLLECT_ENV = "collect_env.txt"  # a raw capture folder's `python -m torch.utils.collect_env`  # DIR/deep.json: --deep results, when --deep ran


# --------------------------------------------------------------------------- probing


def probe_env_fast(target: Target) -> EnvFacts:
    """--fast: no python run; torch facts read from the files of the installed package."""
    from envtool.adapters.host.env_probe import read_installed, read_torch_static

    env = EnvFacts(
        python_exe=str(target.python),
        prefix=str(target.prefix) if target.prefix else None,
        name=target.name,
        status="not-probed",
    )
    if target.prefix is None:
        return env
    conda, pip_torch = read_installed(target.prefix)
    env.conda_packages, env.pip_torch = conda, pip_torch
    env.torch = read_torch_static(target.prefix)
    return env


def probe_facts(
    target: Target, fast: bool, driver: str | None, record: dict[str, str] | None
) -> tuple[HostFacts, EnvFacts]:
    """Host and env probes run at the same time: the env probe (importing torch, seconds) would
    otherwise add to the host probe (nvidia-smi, up to a second or two)."""
    from envtool.adapters.host import host_probe

    def host() -> HostFacts:
        facts = host_probe.probe_host(record=record)
        return host_probe.apply_overrides(facts, driver=driver) if driver else facts

    stop_env = threading.Event()  # set when the env probe is not worth waiting for

    def env() -> EnvFacts:
        if fast:
            return probe_env_fast(target)
        from envtool.adapters.host.env_probe import probe_env

        return probe_env(target, cancel=stop_env)

    def env_with_install_facts() -> EnvFacts:
        facts = env()
        if target.prefix is not None:
            read_install_facts(facts, Path(target.prefix), with_drift=not fast)
        return facts

    with ThreadPoolExecutor(max_workers=2) as pool:
        fut_env = pool.submit(env_with_install_facts)
        fut_host = pool.submit(host)
        try:
            host_facts = fut_host.result()
        except BaseException:  # e.g. a bad ENVTOOL_NVML_TIMEOUT: say so now, not after the env
            stop_env.set()
            raise
        if host_facts.driver_hung:  # torch's CUDA init would block on it for the whole time-out
            stop_env.set()
        return host_facts, fut_env.result()


def read_install_facts(env: EnvFacts, prefix: Path, with_drift: bool) -> None:
    """Fill install_state (envtool's install markers) and, for a finished envtool install,
    drift against the lock it was installed from (what `envtool verify` computes)."""
    from envtool.adapters.install.install_state import (
        read_incomplete_marker,
        read_install_state,
        read_state_record,
    )

    env.install_state = read_install_state(prefix)
    record = (
        read_incomplete_marker(prefix)
        if env.install_state == "incomplete"
        else read_state_record(prefix)
    )
    env.install_lock = (record or {}).get("lock_path")
    if not with_drift or env.install_state != "complete":
        return
    lock_path = env.install_lock
    if not lock_path or not Path(lock_path).is_file():
        return
    try:
        from envtool.adapters.install.installed import compute_drift

        env.drift = compute_drift(prefix, lock_path)
    except Exception as exc:  # noqa: BLE001 - a broken lock is verify's finding; doctor goes on
        env.drift = {"error": f"{type(exc).__name__}: {exc}"}


# --------------------------------------------------------------------------- record / replay


def write_record(directory: Path, record: dict[str, str], host: HostFacts, env: EnvFacts) -> None:
    """Each file through write_atomic: a symlink planted in DIR is replaced, never written
    through; a planted link for the host/ folder itself is refused."""
    import os

    from envtool.adapters.files import write_atomic

    hdir = directory / HOST_DIR
    if os.path.islink(hdir):
        raise UsageError(
            f"--record {hdir}: is a symbolic link", "pass a new directory for the recording"
        )
    hdir.mkdir(parents=True, exist_ok=True)
    for name, text in record.items():
        safe = Path(name).name  # keys are file names; never let one escape DIR
        write_atomic(hdir / safe, text)
    write_atomic(directory / "host.json", json.dumps(host.to_dict(), indent=2))
    write_atomic(directory / ENV_FILE, json.dumps(env.to_dict(), indent=2))


def read_replay(directory: Path, driver: str | None = None) -> tuple[HostFacts, EnvFacts]:
    """Rebuild facts from a --record directory: raw host outputs re-parsed (so parser fixes apply
    to old recordings), host.json only when no raw outputs were saved.

    A recording is someone else's files: each is read size-capped, as a regular file and never
    through a symlink (a link to ~/.ssh/id_rsa must not be printed back), its JSON parsed strictly
    and every field type-checked; anything else is one line naming the file."""
    import os

    from envtool.adapters.host.host_probe import RECORD_FILES, facts_from_record

    if not directory.is_dir():
        what = "a file, not a directory" if directory.exists() else "no such directory"
        raise UsageError(
            f"--replay {directory}: {what}",
            "pass a directory written by `envtool doctor --record DIR`",
        )
    env_path = directory / ENV_FILE
    hdir = directory / HOST_DIR
    if os.path.islink(hdir):
        raise UsageError(
            f"--replay {hdir}: is a symbolic link", "pass the recording itself, not links into it"
        )
    host_json = directory / "host.json"
    recorded = os.path.lexists(env_path) or hdir.is_dir() or os.path.lexists(host_json)
    if not recorded:  # a folder of raw captures (a bug report): nvidia-smi outputs, collect_env
        captured = [n for n in (*RECORD_FILES, COLLECT_ENV) if os.path.lexists(directory / n)]
        if captured:
            return _replay_captures(directory, captured, driver)
    if not os.path.lexists(env_path) or not (hdir.is_dir() or os.path.lexists(host_json)):
        raise UsageError(
            f"--replay {directory}: not a doctor recording (needs {ENV_FILE} and {HOST_DIR}/)",
            "record one with `envtool doctor --record DIR`",
        )
    env = EnvFacts.from_dict(_recorded_json(env_path), f"--replay {env_path}")
    present = [n for n in RECORD_FILES if hdir.is_dir() and os.path.lexists(hdir / n)]
    if present:
        raw = {n: _recorded_bytes(hdir / n).decode("utf-8", errors="replace") for n in present}
        source = f"--replay {hdir}"
        host = facts_from_record(raw, source)
        # what the parsers made of the text files is checked like host.json would be (a
        # 5000-digit driver version, a GPU named by a megabyte)
        HostFacts.from_dict(host.to_dict(), source)
    else:
        host = HostFacts.from_dict(_recorded_json(host_json), f"--replay {host_json}")
    if driver:
        from envtool.adapters.host.host_probe import apply_overrides

        host = apply_overrides(host, driver=driver)
    return host, env


def _replay_captures(
    directory: Path, names: list[str], driver: str | None
) -> tuple[HostFacts, EnvFacts]:
    """Facts from a folder of raw captures under the record's file names (`nvidia-smi.txt`,
    `nvidia-smi-q.xml`, `query.csv`, `topo.txt`, …) plus `collect_env.txt` (what
    `python -m torch.utils.collect_env` printed): host facts parsed as a recording's are, env facts
    from collect_env (none without it)."""
    from envtool.adapters.host.host_probe import apply_overrides, facts_from_record
    from envtool.core.collect_env import parse_collect_env

    text = {n: _recorded_bytes(directory / n).decode("utf-8", errors="replace") for n in names}
    source = f"--replay {directory}"
    host = facts_from_record({n: v for n, v in text.items() if n != COLLECT_ENV}, source)
    HostFacts.from_dict(host.to_dict(), source)
    if COLLECT_ENV in text:
        env = parse_collect_env(text[COLLECT_ENV])
        env.python_exe = COLLECT_ENV  # the python that printed it
    else:
        env = EnvFacts(status="not-probed")
    return (apply_overrides(host, driver=driver) if driver else host), env


def _recorded_bytes(path: Path) -> bytes:
    from envtool.adapters.files import RECORDING_LIMIT, read_bytes

    try:
        return read_bytes(path, RECORDING_LIMIT, follow_symlinks=False, what="recording file")
    except UsageError as exc:
        raise UsageError(f"--replay {exc.message}", exc.hint) from None


def _recorded_json(path: Path) -> Any:
    from envtool.core.safe_load import parse_json

    hint = "re-record it with `envtool doctor --record DIR`"
    return parse_json(_recorded_bytes(path), f"--replay {path}", hint)


def read_replay_deep(directory: Path) -> dict[str, Any] | None:
    import os

    from envtool.adapters.host.deep import check_deep_record

    path = directory / DEEP_FILE
    if not os.path.lexists(path):
        return None
    return check_deep_record(_recorded_json(path), f"--replay {path}")


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
            f": torch {t.version} on {len(host.gpus)}× {host.gpus[0].name}"
            f" (driver {host.driver_version})"
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
@click.argument("name", required=False)
@click.option("--prefix", help="Diagnose the environment at this prefix.")
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

    deep_result = None
    if replay_dir:
        host, env = read_replay(replay_dir, driver)
        deep_result = read_replay_deep(replay_dir)
    else:
        from envtool.adapters.locate import resolve_target

        target = resolve_target(name, prefix, python_exe)
        record: dict[str, str] | None = {} if record_dir else None
        host, env = probe_facts(target, fast, driver, record)
        if record_dir is not None:
            try:
                write_record(record_dir, record or {}, host, env)
            except OSError as exc:
                raise UsageError(
                    f"--record {record_dir}: cannot write the recording ({exc.strerror})",
                    "pass a new or writable directory",
                ) from None
        if deep or deep_cpu:
            from envtool.adapters.host.deep import probe_deep
            from envtool.output import note

            note("envtool doctor: running --deep (GPU matmuls, all-reduce) in the environment…")
            deep_result = probe_deep(str(target.python), _deep_gpu_count(host, env), cpu=deep_cpu)
            if record_dir is not None:
                from envtool.adapters.files import write_atomic

                write_atomic(record_dir / DEEP_FILE, json.dumps(deep_result, indent=2))

    checks = run_checks(host, env) + run_deep_checks(deep_result)
    from envtool.adapters.lockfile.variant_lock import doctor_variant_check

    # installed from variant locks: is it still the variant this host would pick?
    if picked := doctor_variant_check(host, env.install_lock, env.name or "NAME"):
        checks.append(picked)  # type: ignore[arg-type]
    text = [] if as_json else terminal_lines(render_human(checks, host, env, verbose, deep_result))
    return Result(
        "doctor",
        doctor_payload(checks, host, env),
        text,
        exit_code=1 if overall(checks) == "fail" else 0,
    )
