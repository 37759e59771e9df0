"""A host record, pure: the raw outputs a host probe gathers (NVML's answers as JSON, nvidia-smi's
text, /proc, nvcc, environment variables, file-system facts), keyed by stable file names (the
`doctor --record DIR` layout), turned into HostFacts by `facts_from_record` with the parsers in
core/nvidia_smi; `apply_overrides` plans for another machine (--driver, CONDA_OVERRIDE_CUDA).

The same code for a live probe (adapters/host/host_probe.collect_host_raw gathers the outputs)
and a replayed recording, which is someone else's files: every value is type-checked first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from envtool.core import cuda as cuda_kb
from envtool.core import nvidia_smi as smi
from envtool.core.facts import GpuFacts, HostFacts, check_fields
from envtool.core.versions import cuda_from_int, major_minor, parse_version
from envtool.errors import UsageError

# Record file names (the `doctor --record DIR` layout). Stable: replays of old records depend on them.
NVML_JSON = "nvml.json"
SMI_XML = "nvidia-smi-q.xml"
SMI_Q_TEXT = "nvidia-smi-q.txt"
SMI_TABLE = "nvidia-smi.txt"
SMI_QUERY_CSV = "query.csv"
PROC_VERSION = "proc-driver-version.txt"
NVCC_VERSION = "nvcc-version.txt"
TOPOLOGY = "topo.txt"
ENV_JSON = "env.json"  # the environment variables below, as set on the host
FS_JSON = "fs.json"  # /dev/shm size, CUDA_HOME resolved, libraries found on LD_LIBRARY_PATH
PROBE_JSON = "probe.json"  # what was tried and failed, so a replay says the same no_driver_reason

RECORD_FILES = (
    NVML_JSON,
    SMI_XML,
    SMI_Q_TEXT,
    SMI_TABLE,
    SMI_QUERY_CSV,
    PROC_VERSION,
    NVCC_VERSION,
    TOPOLOGY,
    ENV_JSON,
    FS_JSON,
    PROBE_JSON,
)

# What each JSON record file holds: a replayed recording is someone else's file, so every value a
# fact is built from is type-checked first (facts.check_fields), never met as a TypeError.
_NVML_SCHEMA: dict[str, Any] = {
    "driver_version": str | None,
    "cuda_driver_version": int | None,
    "devices": list[dict[str, Any]],
    "error": str | None,
    "hung": bool | None,
    "timeout_s": float | None,
}
_NVML_DEVICE_SCHEMA: dict[str, Any] = {
    "index": int,
    "name": str | None,
    "capability": list[int] | None,
    "memory_total": int | None,
    "uuid": str | None,
    "bus_id": str | None,
    "mig_current": int | None,  # NVML's mode, 0/1 (a bool is an int too)
    "mig_devices": int | None,
    "nvlink_active": int | None,
}
_FS_SCHEMA: dict[str, Any] = {
    "shm_bytes": int | None,
    "cuda_home": str | None,
    "ld_library_hits": list[str],
}
_PROBE_SCHEMA: dict[str, Any] = {"errors": list[str], "timed_out": list[str]}

ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "CONDA_OVERRIDE_CUDA",
    "ENVTOOL_DRIVER_VERSION",
)


def facts_from_record(raw: Mapping[str, str], source: str | None = None) -> HostFacts:
    """Rebuild HostFacts from raw outputs (a live probe's or a `doctor --record` directory's).
    `source` names where they came from (a replayed DIR/host): a JSON file whose values are not
    what the probe writes is a one-line UsageError naming the file and the field."""

    def name(file: str) -> str:
        return f"{source}/{file}" if source else file

    facts = HostFacts()
    probe_file = name(PROBE_JSON)
    probe = check_fields(_json(raw.get(PROBE_JSON), probe_file), _PROBE_SCHEMA, probe_file)
    errors = list(probe.get("errors", []))
    nvml = check_fields(_json(raw.get(NVML_JSON), name(NVML_JSON)), _NVML_SCHEMA, name(NVML_JSON))
    for i, dev in enumerate(nvml.get("devices") or []):
        check_fields(dev, _NVML_DEVICE_SCHEMA, name(NVML_JSON), f"devices[{i}].")
        if "index" not in dev or len(dev.get("capability") or [0, 0]) != 2:
            raise UsageError(
                f"{name(NVML_JSON)}: devices[{i}] needs an index and a [major, minor] capability",
                "re-record it with `envtool doctor --record DIR`",
            )

    if nvml and nvml.get("error") is None and nvml.get("driver_version"):
        facts.source = "nvml"
        facts.driver_version = nvml["driver_version"]
        if nvml.get("cuda_driver_version"):
            facts.driver_cuda = cuda_from_int(int(nvml["cuda_driver_version"]))
        facts.gpus = [_gpu_from_nvml(d) for d in nvml.get("devices", [])]
        links = [d.get("nvlink_active") for d in nvml.get("devices", [])]
        if any(n is not None for n in links):
            facts.nvlink = any(links)
    else:
        report = _report_from_smi(raw, errors)
        if report is not None and report[0].driver_version:
            facts.driver_version = report[0].driver_version
            facts.driver_cuda = report[0].driver_cuda
            facts.gpus = report[0].gpus
            facts.source = report[1]
        # NVML did not answer in time: the /proc version stands, the driver is not healthy.
        facts.driver_hung = bool(nvml.get("hung"))
        proc_driver = smi.parse_proc_driver_version(raw.get(PROC_VERSION, ""))
        if proc_driver and not facts.driver_version:
            facts.driver_version, facts.source = proc_driver, "proc"
        if facts.driver_version and not facts.driver_cuda:
            # /proc names no CUDA version: fall back to the driver table (GA floors), a lower bound.
            facts.driver_cuda = cuda_kb.newest_cuda_native(facts.driver_version)

    if TOPOLOGY in raw:
        facts.topology = raw[TOPOLOGY]
        nvlink = smi.parse_topology_nvlink(raw[TOPOLOGY])
        if nvlink is not None:
            facts.nvlink = nvlink

    env = check_fields(
        _json(raw.get(ENV_JSON), name(ENV_JSON)),
        {v: str | None for v in ENV_VARS},
        name(ENV_JSON),
    )
    facts.cuda_visible_devices = env.get("CUDA_VISIBLE_DEVICES")
    facts.ld_library_path = env.get("LD_LIBRARY_PATH")
    fs = check_fields(_json(raw.get(FS_JSON), name(FS_JSON)), _FS_SCHEMA, name(FS_JSON))
    facts.shm_bytes = fs.get("shm_bytes")
    facts.cuda_home = fs.get("cuda_home")
    facts.ld_library_hits = list(fs.get("ld_library_hits", []))
    facts.nvcc_version = smi.parse_nvcc_version(raw.get(NVCC_VERSION, ""))

    facts.probe_errors = errors
    if "nvidia-smi" in probe.get("timed_out", []) and facts.has_driver:
        facts.driver_hung = True  # /proc names a driver that nvidia-smi could not reach
    if not facts.has_driver:
        tried = "; ".join(errors) or "nothing answered"
        facts.no_driver_reason = f"no NVIDIA driver: {tried}"
    return apply_overrides(
        facts,
        driver=env.get("ENVTOOL_DRIVER_VERSION"),
        cuda=env.get("CONDA_OVERRIDE_CUDA"),
        origin="env",
    )


def _json(text: str | None, source: str) -> dict[str, Any]:
    """A record's JSON object ({} when the file is absent): bounded nesting, duplicate keys
    refused, anything but an object refused, each with one line naming the file."""
    from envtool.core.safe_load import parse_json

    if not text:
        return {}
    hint = "re-record it with `envtool doctor --record DIR`"
    data = parse_json(text, source, hint)
    if not isinstance(data, dict):
        raise UsageError(f"{source}: expected a JSON object", hint)
    return data


def _gpu_from_nvml(d: dict[str, Any]) -> GpuFacts:
    cap = d.get("capability")
    mem = d.get("memory_total")
    return GpuFacts(
        index=int(d["index"]),
        name=d.get("name") or "",
        capability=f"{cap[0]}.{cap[1]}" if cap else smi.capability_from_name(d.get("name") or ""),
        memory_mib=mem // (1024 * 1024) if mem else None,
        uuid=d.get("uuid"),
        mig_enabled=bool(d.get("mig_current")),
        mig_devices=int(d.get("mig_devices") or 0),
        bus_id=d.get("bus_id"),
    )


def _report_from_smi(raw: Mapping[str, str], errors: list[str]) -> tuple[smi.SmiReport, str] | None:
    if raw.get(SMI_XML):
        try:
            report = smi.parse_smi_xml(raw[SMI_XML])
            if report.driver_version:
                return report, "nvidia-smi-xml"
        except ValueError:
            pass  # the collector already noted it; fall through to the text outputs
    if raw.get(SMI_Q_TEXT):
        report = smi.parse_smi_query_text(raw[SMI_Q_TEXT])
        if report.driver_version:
            return report, "nvidia-smi"
    if raw.get(SMI_TABLE):
        report = smi.parse_smi_table(raw[SMI_TABLE])
        if raw.get(SMI_QUERY_CSV):
            _merge_query(report, smi.parse_query_csv(raw[SMI_QUERY_CSV]))
        if report.driver_version:
            return report, "nvidia-smi"
    if raw.get(SMI_QUERY_CSV):  # a csv alone still names driver and GPUs
        report = smi.parse_query_csv(raw[SMI_QUERY_CSV])
        if report.driver_version:
            return report, "nvidia-smi"
    return None


def _merge_query(table: smi.SmiReport, query: smi.SmiReport) -> None:
    """The csv has full names, UUIDs and compute capability; the table has the CUDA version and
    MIG device counts. Match GPUs by PCI bus id, else by index."""
    by_bus = {g.bus_id: g for g in query.gpus if g.bus_id}
    by_index = {g.index: g for g in query.gpus}
    for g in table.gpus:
        q = by_bus.get(g.bus_id) or by_index.get(g.index)
        if q is None:
            continue
        g.name = q.name or g.name
        g.uuid = q.uuid or g.uuid
        g.memory_mib = q.memory_mib or g.memory_mib
        g.capability = q.capability or smi.capability_from_name(g.name) or g.capability
        g.mig_enabled = g.mig_enabled or q.mig_enabled
    table.driver_version = table.driver_version or query.driver_version


# ---------------------------------------------------------------- overrides


def apply_overrides(
    facts: HostFacts, driver: str | None = None, cuda: str | None = None, origin: str = "flag"
) -> HostFacts:
    """Plan for another machine: replace the driver version and/or the CUDA it supports.

    Follows conda's CONDA_OVERRIDE_CUDA convention: a version replaces `driver_cuda`; an empty
    string means "no CUDA" (plan as if there were no driver). On a host without a driver a value
    makes a virtual driver (`source="override"`). Returns a new HostFacts; `facts` is unchanged.
    """
    if driver is None and cuda is None:
        return facts
    names = {
        "env": ("ENVTOOL_DRIVER_VERSION", "CONDA_OVERRIDE_CUDA"),
        "flag": ("--driver", "--cuda"),
    }
    driver_name, cuda_name = names.get(origin, names["flag"])
    new = dataclasses.replace(facts, gpus=list(facts.gpus), overrides=dict(facts.overrides))

    if cuda is not None and cuda.strip() == "":
        new.overrides["CONDA_OVERRIDE_CUDA"] = ""
        new.driver_version = new.driver_cuda = None
        new.source = "override"
        new.no_driver_reason = "no NVIDIA driver: CONDA_OVERRIDE_CUDA is set empty (plan for CPU)"
        return new

    virtual = not facts.has_driver
    if driver is not None:
        _check_version(driver, driver_name, "a driver version like 535.54.03")
        new.overrides["ENVTOOL_DRIVER_VERSION"] = driver.strip()
        new.driver_version = driver.strip()
        if cuda is None:  # the CUDA a driver supports follows from its version (GA table)
            new.driver_cuda = cuda_kb.newest_cuda_native(driver.strip()) or new.driver_cuda
    if cuda is not None:
        _check_version(cuda, cuda_name, "a CUDA version like 12.4")
        new.overrides["CONDA_OVERRIDE_CUDA"] = major_minor(cuda)
        new.driver_cuda = major_minor(cuda)
        if new.driver_version is None:  # virtual driver: the oldest one that runs this CUDA
            new.driver_version = cuda_kb.min_driver(new.driver_cuda)
    if virtual and new.driver_version is not None:
        new.source = "override"
        new.no_driver_reason = None
    return new


def _check_version(value: str, name: str, example: str) -> None:
    try:
        parse_version(value)
    except ValueError:
        shown = value if len(value) <= 40 else value[:39] + "…"
        raise UsageError(f"{name}={shown!r} is not a version", f"set it to {example}") from None


def visible_gpus(host: HostFacts) -> tuple[list[GpuFacts], list[GpuFacts]]:
    """(visible, hidden): the GPUs this process would use, by CUDA_VISIBLE_DEVICES when it lists
    indices ("" or "-1" hides them all); names (UUIDs, MIG) are not mapped, so every GPU counts."""
    visible = host.cuda_visible_devices
    if visible is None:
        return list(host.gpus), []
    tokens = [t.strip() for t in visible.split(",") if t.strip()]
    if not tokens or tokens[0] == "-1":
        return [], list(host.gpus)
    if not all(t.isdigit() for t in tokens):
        return list(host.gpus), []
    # CUDA stops at the first index that names no GPU
    shown = []
    for t in tokens:
        found = [g for g in host.gpus if str(g.index) == t]
        if not found:
            break
        shown.append(found[0])
    return shown, [g for g in host.gpus if g not in shown]


def render_gpu_count(gpus: list[GpuFacts]) -> str:
    """'2× Tesla T4', '1× NVIDIA A100, 1× Tesla T4' (names in first-seen order)."""
    counts: dict[str, int] = {}
    for g in gpus:
        counts[g.name] = counts.get(g.name, 0) + 1
    return ", ".join(f"{n}× {name}" for name, n in counts.items())


def render_visible_gpus(host: HostFacts) -> str:
    """The GPUs a headline names: the visible ones, and what CUDA_VISIBLE_DEVICES hides
    ('1× NVIDIA A100 (CUDA_VISIBLE_DEVICES hides 1× Tesla T4)')."""
    shown, hidden = visible_gpus(host)
    text = render_gpu_count(shown) or "no visible GPU"
    if hidden:
        text += f" (CUDA_VISIBLE_DEVICES hides {render_gpu_count(hidden)})"
    return text
