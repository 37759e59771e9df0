"""Host probe: what NVIDIA driver, GPUs and CUDA tooling this machine offers.

Two steps, so a recorded host replays through the same code: `collect_host_raw` gathers raw
outputs (NVML answers as JSON, nvidia-smi text, /proc, nvcc, env vars, a few file-system facts)
into a dict keyed by stable file names; core/host_record.facts_from_record (pure) turns such a
dict into HostFacts with the parsers in core/nvidia_smi. `probe_host` is both in a row. Nothing here raises for a missing or
broken driver: that is a fact (`driver_version is None`, `no_driver_reason`), not an error.

Source order: NVML (nvidia-ml-py, the same library nvidia-smi uses, no text parsing) ->
/proc/driver/nvidia/version + `nvidia-smi -q -x` -> `nvidia-smi -q` -> plain `nvidia-smi` +
`nvidia-smi --query-gpu=... --format=csv`.

A wedged driver (a GPU fallen off the bus, Xid 79) blocks NVML calls for minutes or for good, and
nvidia-smi with them: NVML gets a bounded wait, and when it does not answer the probe reads only
/proc and records `driver_hung`, so `doctor` gives a verdict instead of hanging.
"""

from __future__ import annotations

import glob
import json
import math
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from envtool.adapters.proc import Runner, run_capture
from envtool.core import nvidia_smi as smi
from envtool.core.facts import HostFacts
from envtool.core.host_record import (
    ENV_JSON,
    ENV_VARS,
    FS_JSON,
    NVCC_VERSION,
    NVML_JSON,
    PROBE_JSON,
    PROC_VERSION,
    SMI_QUERY_CSV,
    SMI_TABLE,
    SMI_XML,
    TOPOLOGY,
    facts_from_record,
)
from envtool.errors import UsageError

LIB_PATTERNS = ("libcudart.so*", "libnccl.so*", "libcuda.so*", "libcublas.so*")

_LOAD_PYNVML: Any = object()  # sentinel: import the real pynvml lazily

# NVML answers in tens of milliseconds on a healthy host; without persistence mode nvmlInit brings
# up every GPU first, which can take seconds on a multi-GPU node. A wedged driver blocks for
# minutes or forever, so 10 s separates the two with room to spare. ENVTOOL_NVML_TIMEOUT (seconds)
# lengthens it for a node that is only slow.
NVML_TIMEOUT_S = 10.0
NVML_TIMEOUT_VAR = "ENVTOOL_NVML_TIMEOUT"
# nvidia-smi is a client of the same driver library: it gets the same bound (ENVTOOL_NVML_TIMEOUT
# lengthens both), and after one time-out no further nvidia-smi is started (each would block on
# the same driver). nvcc --version answers in well under a second; 5 s covers a cold NFS mount.
NVCC_TIMEOUT_S = 5.0


def probe_host(
    environ: Mapping[str, str] | None = None,
    runner: Runner = run_capture,
    nvml: object | None = _LOAD_PYNVML,
    record: dict[str, str] | None = None,
    *,
    proc_root: Path = Path("/proc"),
    shm_path: str = "/dev/shm",
    nvml_timeout: float | None = None,
) -> HostFacts:
    """Probe this host. `environ` (default os.environ) is what the probe reads and what its
    commands run with; `nvml=None` skips NVML; `record` receives every raw output;
    `nvml_timeout` (default ENVTOOL_NVML_TIMEOUT, else NVML_TIMEOUT_S) bounds the wait for NVML.

    Raises UsageError only for a malformed CONDA_OVERRIDE_CUDA / ENVTOOL_DRIVER_VERSION /
    ENVTOOL_NVML_TIMEOUT value.
    """
    raw = collect_host_raw(
        environ,
        runner,
        nvml,
        proc_root=proc_root,
        shm_path=shm_path,
        nvml_timeout=nvml_timeout,
    )
    if record is not None:
        record.update(raw)
    return facts_from_record(raw)


# ---------------------------------------------------------------- collection (touches the host)


def collect_host_raw(
    environ: Mapping[str, str] | None = None,
    runner: Runner = run_capture,
    nvml: object | None = _LOAD_PYNVML,
    *,
    proc_root: Path = Path("/proc"),
    shm_path: str = "/dev/shm",
    nvml_timeout: float | None = None,
) -> dict[str, str]:
    """Gather raw outputs, stopping at the first source that names the driver and its GPUs."""
    env = dict(os.environ if environ is None else environ)
    if nvml_timeout is None:
        nvml_timeout = _nvml_timeout_from_env(env)
    raw: dict[str, str] = {}
    errors: list[str] = []
    raw[ENV_JSON] = json.dumps({k: env[k] for k in ENV_VARS if k in env}, indent=1, sort_keys=True)

    # nvcc needs nothing from the driver probes: run it alongside them (doctor --fast latency).
    cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if not cuda_home and os.path.isdir("/usr/local/cuda"):
        cuda_home = "/usr/local/cuda"
    nvcc = str(Path(cuda_home) / "bin" / "nvcc") if cuda_home else "nvcc"
    if cuda_home and not os.path.exists(nvcc):
        nvcc = "nvcc"
    pool = ThreadPoolExecutor(max_workers=2)
    nvcc_future = pool.submit(runner, [nvcc, "--version"], timeout=NVCC_TIMEOUT_S, env=env)
    timed_out: list[str] = []  # programs that did not answer in time (probe.json "timed_out")

    if nvml is _LOAD_PYNVML:
        nvml = _import_pynvml(errors)
    nvml_ok = nvml_hung = False
    if nvml is not None:
        data = read_nvml_bounded(nvml, nvml_timeout)
        raw[NVML_JSON] = json.dumps(data, indent=1)
        nvml_ok = data.get("error") is None
        nvml_hung = bool(data.get("hung"))
        if not nvml_ok:
            errors.append(f"NVML: {data['error']}")

    gpu_count = len(json.loads(raw[NVML_JSON]).get("devices", [])) if nvml_ok else 0
    if not nvml_ok:
        proc_file = proc_root / "driver" / "nvidia" / "version"
        try:  # a plain file read: answers even when the driver does not
            raw[PROC_VERSION] = proc_file.read_text(errors="replace")
        except OSError:
            errors.append(f"{proc_file}: absent")
        if nvml_hung:
            # nvidia-smi is a client of the same libnvidia-ml, so it blocks on the same driver
            # call; each of its tries would wait out its 30 s time-out and leave behind a process
            # the kill cannot end (stuck in the driver). Skip it (and topology with it).
            errors.append("nvidia-smi: not run (it would block on the same hung driver)")
        else:
            gpu_count = _collect_smi(raw, errors, runner, env, nvml_timeout, timed_out)

    if gpu_count >= 2 and "nvidia-smi" not in timed_out:  # topology: only between GPUs
        res = runner(["nvidia-smi", "topo", "-m"], timeout=nvml_timeout, env=env)
        if res.ok:
            raw[TOPOLOGY] = res.stdout
        elif res.timed_out:
            timed_out.append("nvidia-smi")
            errors.append(_no_answer("nvidia-smi topo -m", nvml_timeout))

    res = nvcc_future.result()
    pool.shutdown()
    if res.ok:
        raw[NVCC_VERSION] = res.stdout
    elif res.timed_out:
        timed_out.append("nvcc")
        errors.append(_no_answer(nvcc, NVCC_TIMEOUT_S, "the CUDA toolkit's disk may be hung"))

    raw[FS_JSON] = json.dumps(
        {
            "shm_bytes": _shm_bytes(shm_path),
            "cuda_home": cuda_home,
            "ld_library_hits": _ld_library_hits(env.get("LD_LIBRARY_PATH")),
        },
        indent=1,
    )
    probe: dict[str, Any] = {"errors": errors}
    if timed_out:
        probe["timed_out"] = sorted(set(timed_out))
    raw[PROBE_JSON] = json.dumps(probe, indent=1)
    return raw


def _no_answer(program: str, seconds: float, why: str = "the driver may be hung") -> str:
    return f"{program} did not answer in {seconds:g} s — {why}"


def _collect_smi(
    raw: dict[str, str],
    errors: list[str],
    runner: Runner,
    env: dict,
    timeout: float = NVML_TIMEOUT_S,
    timed_out: list[str] | None = None,
) -> int:
    """nvidia-smi in decreasing richness; returns the number of GPUs seen. The first call that
    does not answer in `timeout` ends it: the next would block on the same driver."""
    hung = timed_out if timed_out is not None else []

    def smi_run(argv: list[str]) -> Any:
        res = runner(argv, timeout=timeout, env=env)
        if res.timed_out:
            hung.append("nvidia-smi")
            errors.append(_no_answer(" ".join(argv), timeout))
        return res

    res = smi_run(["nvidia-smi", "-q", "-x"])
    if res.missing:
        errors.append("nvidia-smi: not found on PATH")
        return 0
    if res.timed_out:
        return 0
    if res.ok:
        raw[SMI_XML] = res.stdout
        try:
            report = smi.parse_smi_xml(res.stdout)
            if report.driver_version:
                return len(report.gpus)
        except ValueError as exc:
            errors.append(f"nvidia-smi -q -x: {exc}")
    else:
        errors.append(f"nvidia-smi -q -x: {_why(res)}")

    res = smi_run(["nvidia-smi"])
    if not res.ok:
        if not res.timed_out:
            errors.append(f"nvidia-smi: {_why(res)}")
        return 0
    raw[SMI_TABLE] = res.stdout
    # The table truncates long names ('NVIDIA GeForce RTX 2080 ...') and has no capability.
    query = ["nvidia-smi", f"--query-gpu={','.join(smi.QUERY_FIELDS)}", "--format=csv"]
    res = smi_run(query)
    if not res.ok and not res.timed_out:  # drivers before ~510 do not know `compute_cap`
        fields = [f for f in smi.QUERY_FIELDS if f != "compute_cap"]
        res = smi_run([query[0], f"--query-gpu={','.join(fields)}", query[2]])
    if res.ok:
        raw[SMI_QUERY_CSV] = res.stdout
    return len(smi.parse_smi_table(raw[SMI_TABLE]).gpus)


def _nvml_timeout_from_env(env: Mapping[str, str]) -> float:
    value = env.get(NVML_TIMEOUT_VAR)
    if value is None or not value.strip():
        return NVML_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not (seconds > 0 and math.isfinite(seconds)):
        raise UsageError(
            f"{NVML_TIMEOUT_VAR}={value!r} is not a number of seconds",
            f"set it to a positive number like 30, or unset it (default {NVML_TIMEOUT_S:g})",
        )
    return min(seconds, threading.TIMEOUT_MAX)  # a thread wait refuses longer (OverflowError)


def _why(res: Any) -> str:
    if res.timed_out:
        return "timed out"
    tail = (res.stderr or res.stdout or "").strip().splitlines()
    return f"exit {res.returncode}" + (f": {tail[-1]}" if tail else "")


def _import_pynvml(errors: list[str]) -> object | None:
    try:
        import pynvml  # nvidia-ml-py; lazy so `envtool --help` stays fast
    except ImportError as exc:
        errors.append(f"NVML: nvidia-ml-py not importable ({exc})")
        return None
    return pynvml


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def read_nvml_bounded(nvml: Any, timeout: float = NVML_TIMEOUT_S) -> dict[str, Any]:
    """`read_nvml`, waiting at most `timeout` seconds. On time-out: {"error": ..., "hung": True}.

    NVML calls are C calls that cannot be interrupted, so the reader runs in a daemon thread that
    may outlive the probe (a daemon thread does not hold the process at exit; a
    ThreadPoolExecutor's exit hook would join it and hang).
    """
    box: dict[str, dict[str, Any]] = {}

    def work() -> None:
        box["data"] = read_nvml(nvml)

    reader = threading.Thread(target=work, name="envtool-nvml", daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        return {
            "error": f"no answer in {timeout:g} s — the driver looks hung",
            "hung": True,
            "timeout_s": timeout,
        }
    return box.get("data") or {"error": "the NVML reader stopped without an answer"}


def read_nvml(nvml: Any) -> dict[str, Any]:
    """Ask NVML (the pynvml module or a fake with its API) for the driver and each device.

    Returns a JSON-able dict; {"error": "..."} when NVML cannot start (no libnvidia-ml, no driver).
    """
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        out: dict[str, Any] = {
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": int(nvml.nvmlSystemGetCudaDriverVersion()),
            "devices": [],
            "error": None,
        }
        for i in range(int(nvml.nvmlDeviceGetCount())):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            dev: dict[str, Any] = {"index": i, "name": _text(nvml.nvmlDeviceGetName(h))}
            dev["capability"] = _try(lambda h=h: list(nvml.nvmlDeviceGetCudaComputeCapability(h)))
            dev["memory_total"] = _try(lambda h=h: int(nvml.nvmlDeviceGetMemoryInfo(h).total))
            dev["uuid"] = _try(lambda h=h: _text(nvml.nvmlDeviceGetUUID(h)))
            dev["bus_id"] = _try(lambda h=h: _text(nvml.nvmlDeviceGetPciInfo(h).busId))
            mig = _try(lambda h=h: list(nvml.nvmlDeviceGetMigMode(h)))  # [current, pending]
            dev["mig_current"] = mig[0] if mig else None
            dev["mig_devices"] = _count_mig_devices(nvml, h) if mig and mig[0] else 0
            dev["nvlink_active"] = _count_nvlinks(nvml, h)
            out["devices"].append(dev)
        return out
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        _try(nvml.nvmlShutdown)


def _try(fn: Any) -> Any:
    """NVML raises NotSupported for features a GPU lacks (MIG on a GeForce): that is 'unknown'."""
    try:
        return fn()
    except Exception:
        return None


def _count_mig_devices(nvml: Any, handle: Any) -> int:
    top = _try(lambda: int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))) or 0
    return sum(
        1
        for j in range(top)
        if _try(lambda j=j: nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)) is not None
    )


def _count_nvlinks(nvml: Any, handle: Any) -> int | None:
    """Active NVLinks on this GPU; None when NVML cannot say (no NVLink hardware). Cheap: <= 18 calls."""
    states = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        state = _try(lambda link=link: nvml.nvmlDeviceGetNvLinkState(handle, link))
        if state is None:
            break
        states.append(bool(state))
    return sum(states) if states else None


def _shm_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


def _ld_library_hits(ld_path: str | None) -> list[str]:
    hits: list[str] = []
    for d in (ld_path or "").split(os.pathsep):
        if d and os.path.isdir(d):
            for pattern in LIB_PATTERNS:
                hits.extend(sorted(glob.glob(os.path.join(glob.escape(d), pattern))))
    return hits


def summarize_host(host: HostFacts) -> dict[str, Any]:
    """Driver, GPU names and how many GPUs ranks can see (after CUDA_VISIBLE_DEVICES)."""
    driver = host.driver_version
    gpus = [g.name for g in host.gpus]
    cvd = host.cuda_visible_devices
    if cvd is None:
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = len(gpus)
    if cvd is not None:
        entries = [e for e in cvd.split(",") if e.strip() and e.strip() != "-1"]
        visible = min(visible, len(entries))
    return {"driver": driver, "gpus": gpus, "visible_gpus": visible}
