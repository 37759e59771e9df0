"""doctor's probing, recording and replay: the facts `envtool doctor` checks (and launch's
pre-flight reuses), from this host and an environment (probed concurrently), or rebuilt from a
`doctor --record DIR` folder (or a bug report's raw captures) for `doctor --replay DIR`.

A recording is someone else's files: every read is bounded, no-follow and strictly parsed.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envtool.core.facts import EnvFacts, HostFacts
from envtool.errors import UsageError

if TYPE_CHECKING:
    from envtool.adapters.locate import Target

HOST_DIR = "host"  # DIR/host/<raw probe outputs, one file each>


ENV_FILE = "env.json"  # DIR/env.json: EnvFacts.to_dict()


DEEP_FILE = "deep.json"  # DIR/deep.json: --deep results, when --deep ran


COLLECT_ENV = "collect_env.txt"  # a raw capture folder's `python -m torch.utils.collect_env`


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
    from envtool.core.host_record import apply_overrides

    def host() -> HostFacts:
        facts = host_probe.probe_host(record=record)
        return apply_overrides(facts, driver=driver) if driver else facts

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
    from envtool.adapters.lockfile.pixi_lock import lock_file_exists

    if not lock_path or not lock_file_exists(lock_path):  # a pixi.lock's: <file>#environment=
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

    from envtool.core.host_record import RECORD_FILES, facts_from_record

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
        from envtool.core.host_record import apply_overrides

        host = apply_overrides(host, driver=driver)
    return host, env


def _replay_captures(
    directory: Path, names: list[str], driver: str | None
) -> tuple[HostFacts, EnvFacts]:
    """Facts from a folder of raw captures under the record's file names (`nvidia-smi.txt`,
    `nvidia-smi-q.xml`, `query.csv`, `topo.txt`, …) plus `collect_env.txt` (what
    `python -m torch.utils.collect_env` printed): host facts parsed as a recording's are, env facts
    from collect_env (none without it)."""
    from envtool.core.collect_env import parse_collect_env
    from envtool.core.host_record import apply_overrides, facts_from_record

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

    from envtool.core.facts import check_deep_record

    path = directory / DEEP_FILE
    if not os.path.lexists(path):
        return None
    return check_deep_record(_recorded_json(path), f"--replay {path}")


def write_deep_record(directory: Path, deep_result: dict[str, Any]) -> None:
    """--record with --deep: the GPU results beside the probe outputs (DIR/deep.json)."""
    from envtool.adapters.files import write_atomic

    write_atomic(directory / DEEP_FILE, json.dumps(deep_result, indent=2))
