"""Pure parsers for what the NVIDIA stack prints: `nvidia-smi` (table, `-q`, `-q -x`, csv query,
`--version`, `topo -m`), `/proc/driver/nvidia/version` and `nvcc --version`.

Text in, facts out; no I/O here, so the probe and `doctor --replay` share every line of it.
Field names changed over time (driver >= 610 prints `KMD Version` / `CUDA UMD Version` and marks
`Driver Version` / `CUDA Version` deprecated), so every parser accepts both spellings.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

from envtool.core.facts import GpuFacts

# Numbers are at most 9 digits (12 for MiB) and whole: a 5000-digit "version" in a replayed
# output is no version (int() refuses it, and the checks compare versions), so it reads as absent.
_VERSION = re.compile(r"(?<!\d)\d{1,9}(?:\.\d{1,9})+(?!\d)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class SmiReport:
    """What one nvidia-smi output says about the driver and its GPUs."""

    driver_version: str | None = None
    driver_cuda: str | None = None
    gpus: list[GpuFacts] = field(default_factory=list)


def _version_token(text: str | None) -> str | None:
    """'610.57.04 [Deprecated; ...]' -> '610.57.04'; 'Deprecated, see ...' -> None."""
    if not text:
        return None
    m = _VERSION.search(text)
    return m.group(0) if m else None


def _na(text: str | None) -> str | None:
    """nvidia-smi spells 'unknown' as N/A, [N/A], [Not Supported], ... -> None."""
    if text is None:
        return None
    text = text.strip()
    if not text or text.startswith("[") or text.upper() in ("N/A", "NONE"):
        return None
    return text


def _mib(text: str | None) -> int | None:
    """'143771 MiB' / '143771' -> 143771."""
    m = re.search(r"(?<!\d)\d{1,12}(?!\d)", text or "")
    return int(m.group(0)) if m else None


# Fallback only: used when a source (older nvidia-smi XML/-q, the plain table) has no compute
# capability. NVML and `--query-gpu=compute_cap` report it directly. First match wins, so the
# more specific names come first. Source: NVIDIA "CUDA GPUs - Compute Capability" table.
_CAPABILITY_BY_NAME: tuple[tuple[str, str], ...] = (
    (r"\bGB[23]00\b|\bB[123]00\b", "10.0"),
    (r"RTX 50\d0|RTX PRO \d+ Blackwell|Blackwell", "12.0"),
    (r"\bGH200\b|\bH[12]00\b|\bH800\b|\bH20\b", "9.0"),
    (r"\bA100\b|\bA800\b|\bA30\b", "8.0"),
    (r"\bL40S?\b|\bL4\b|\bL20\b|RTX 40\d0|\bAda\b", "8.9"),
    (r"RTX 30\d0|\bA10G?\b|\bA40\b|\bA16\b|\bA2\b|RTX A\d{4}", "8.6"),
    (r"RTX 20\d0|\bT4\b|TITAN RTX|Quadro RTX|GTX 16\d0|\bT[46]00\b|\bT1000\b", "7.5"),
    (r"\bV100\b|TITAN V\b", "7.0"),
    (r"\bP100\b", "6.0"),
    (r"TITAN Xp|TITAN X \(Pascal\)|GTX 10\d0|Quadro P\d+|\bP40\b|\bP4\b", "6.1"),
    (r"\bK80\b", "3.7"),
)


def capability_from_name(name: str) -> str | None:
    """Compute capability from a marketing name ('NVIDIA H200' -> '9.0'); None when unknown."""
    for pattern, cap in _CAPABILITY_BY_NAME:
        if re.search(pattern, name, re.IGNORECASE):
            return cap
    return None


def _fill_capability(gpus: list[GpuFacts]) -> list[GpuFacts]:
    for g in gpus:
        if g.capability is None:
            g.capability = capability_from_name(g.name)
    return gpus


# ---------------------------------------------------------------- nvidia-smi -q -x (XML)


def parse_smi_xml(text: str) -> SmiReport:
    """`nvidia-smi -q -x` -> report. Raises ValueError when the text is not nvidia-smi XML."""
    import xml.etree.ElementTree as ET  # stdlib; expat does not fetch the external DTD

    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise ValueError(f"not nvidia-smi XML: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not nvidia-smi XML: root element is <{root.tag}>")

    def first(node: ET.Element, *tags: str) -> str | None:
        # Newer drivers add kmd_version / cuda_umd_version and deprecate the old tags.
        for tag in tags:
            value = _version_token(node.findtext(tag))
            if value:
                return value
        return None

    report = SmiReport(
        driver_version=first(root, "kmd_version", "driver_version"),
        driver_cuda=first(root, "cuda_umd_version", "cuda_version"),
    )
    for index, gpu in enumerate(root.findall("gpu")):
        mig_devices = gpu.find("mig_devices")
        cap = _na(gpu.findtext("compute_cap") or gpu.findtext("cuda_compute_capability"))
        report.gpus.append(
            GpuFacts(
                index=index,
                name=(gpu.findtext("product_name") or "").strip(),
                capability=cap,
                memory_mib=_mib(gpu.findtext("fb_memory_usage/total")),
                uuid=_na(gpu.findtext("uuid")),
                mig_enabled=(gpu.findtext("mig_mode/current_mig") or "").strip() == "Enabled",
                mig_devices=len(mig_devices.findall("mig_device"))
                if mig_devices is not None
                else 0,
                bus_id=_na(gpu.findtext("pci/pci_bus_id")) or gpu.get("id"),
            )
        )
    _fill_capability(report.gpus)
    return report


# ---------------------------------------------------------------- nvidia-smi -q (text)


@dataclass
class _Node:
    key: str
    value: str | None
    children: list[_Node] = field(default_factory=list)

    def get(self, key: str) -> _Node | None:
        return next((c for c in self.children if c.key == key), None)

    def value_of(self, *path: str) -> str | None:
        node: _Node | None = self
        for key in path:
            node = node.get(key) if node else None
        return node.value if node else None


_Q_LINE = re.compile(r"^(\s*)(\S.*?)(?:\s+:\s?(.*))?$")


def _parse_q_tree(text: str) -> _Node:
    """Indentation tree of `nvidia-smi -q`: 'Key   : value' leaves, bare 'Key' sections."""
    root = _Node("", None)
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith(("#", "=")):
            continue
        m = _Q_LINE.match(raw.rstrip())
        if not m:
            continue
        indent = len(m.group(1).expandtabs(4))
        node = _Node(m.group(2).strip(), m.group(3).strip() if m.group(3) is not None else None)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def parse_smi_query_text(text: str) -> SmiReport:
    """`nvidia-smi -q` (the human-readable full query) -> report."""
    tree = _parse_q_tree(text)
    report = SmiReport(
        driver_version=_version_token(tree.value_of("KMD Version"))
        or _version_token(tree.value_of("Driver Version")),
        driver_cuda=_version_token(tree.value_of("CUDA UMD Version"))
        or _version_token(tree.value_of("CUDA Version")),
    )
    gpu_nodes = [c for c in tree.children if c.value is None and c.key.startswith("GPU ")]
    for index, gpu in enumerate(gpu_nodes):
        report.gpus.append(
            GpuFacts(
                index=index,
                name=gpu.value_of("Product Name") or "",
                capability=_na(gpu.value_of("CUDA Compute Capability")),
                memory_mib=_mib(gpu.value_of("FB Memory Usage", "Total")),
                uuid=_na(gpu.value_of("GPU UUID")),
                mig_enabled=gpu.value_of("MIG Mode", "Current") == "Enabled",
                mig_devices=sum(1 for c in gpu.children if c.key == "MIG Device"),
                bus_id=_na(gpu.value_of("PCI", "Bus Id")) or gpu.key.split(" ", 1)[1],
            )
        )
    _fill_capability(report.gpus)
    return report


# ---------------------------------------------------------------- nvidia-smi (plain table)

_HEADER_DRIVER = re.compile(r"(?:Driver|KMD) Version:\s*(\d{1,9}(?:\.\d{1,9})+)(?!\d)")
_HEADER_CUDA = re.compile(r"CUDA (?:UMD )?Version:\s*(\d{1,9}(?:\.\d{1,9})+)(?!\d)")
_GPU_CELL = re.compile(r"^\s*(\d{1,9})\s+(.+?)\s+(On|Off|WDDM|TCC|MCDM|N/A)\s*$")
_BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_MEM_CELL = re.compile(r"(?<!\d)(\d{1,12})MiB\s*/\s*(\d{1,12})MiB")
_MIG_ROW = re.compile(r"^\|\s+(\d{1,9})\s+(?:\d+|N/A)\s+(?:\d+|N/A)\s+\d+\s+\|")


def parse_smi_table(text: str) -> SmiReport:
    """Plain `nvidia-smi` -> report. Names longer than the column end in '...' there."""
    text = _ANSI.sub("", text)
    d = _HEADER_DRIVER.search(text)
    c = _HEADER_CUDA.search(text)
    report = SmiReport(
        driver_version=d.group(1) if d else None, driver_cuda=c.group(1) if c else None
    )
    by_index: dict[int, GpuFacts] = {}
    current: GpuFacts | None = None
    row_line = 0  # a GPU takes three table lines: name/bus, memory, MIG mode
    in_mig_table = False
    for line in text.splitlines():
        if "MIG devices:" in line:
            in_mig_table, current = True, None
            continue
        if "Processes:" in line:
            in_mig_table, current = False, None
            continue
        if in_mig_table:
            m = _MIG_ROW.match(line)
            if m and int(m.group(1)) in by_index:
                by_index[int(m.group(1))].mig_devices += 1
            continue
        cells = line.strip().strip("|").split("|")
        if len(cells) < 3:
            current = None
            continue
        m = _GPU_CELL.match(cells[0])
        bus = _BUS_ID.search(cells[1])
        if m and bus:
            current = GpuFacts(index=int(m.group(1)), name=m.group(2).strip(), bus_id=bus.group(0))
            by_index[current.index] = current
            report.gpus.append(current)
            row_line = 1
            continue
        if current is None:
            continue
        row_line += 1
        if row_line == 2:
            mem = _MEM_CELL.search(cells[1])
            current.memory_mib = int(mem.group(2)) if mem else None
        elif row_line == 3:
            current.mig_enabled = cells[2].strip() == "Enabled"
            current = None
    _fill_capability(report.gpus)
    return report


# ---------------------------------------------------------------- --query-gpu csv

QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "compute_cap",
    "mig.mode.current",
)


def parse_query_csv(text: str) -> SmiReport:
    """`nvidia-smi --query-gpu=... --format=csv` (with its header row) -> report (no CUDA version:
    the csv query has no field for it)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    report = SmiReport()
    if not rows:
        return report
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0]]
    for pos, row in enumerate(rows[1:]):
        rec = dict(zip(header, (v.strip() for v in row), strict=False))
        report.driver_version = report.driver_version or _version_token(rec.get("driver_version"))
        index = rec.get("index")
        report.gpus.append(
            GpuFacts(
                index=int(index) if index and index.isdigit() and len(index) <= 9 else pos,
                name=rec.get("name", ""),
                capability=_na(rec.get("compute_cap")),
                memory_mib=_mib(_na(rec.get("memory.total"))),
                uuid=_na(rec.get("uuid")),
                mig_enabled=rec.get("mig.mode.current") == "Enabled",
                bus_id=_na(rec.get("pci.bus_id")),
            )
        )
    _fill_capability(report.gpus)
    return report


# ---------------------------------------------------------------- small outputs


def parse_smi_version(text: str) -> SmiReport:
    """`nvidia-smi --version` -> driver and CUDA (prefers the 610+ 'KMD'/'CUDA UMD' lines)."""
    fields_: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields_[key.strip().lower()] = value.strip()
    return SmiReport(
        driver_version=_version_token(fields_.get("kmd version"))
        or _version_token(fields_.get("driver version")),
        driver_cuda=_version_token(fields_.get("cuda umd version"))
        or _version_token(fields_.get("cuda version")),
    )


def parse_proc_driver_version(text: str) -> str | None:
    """/proc/driver/nvidia/version -> '535.54.03'. Handles the proprietary and open kernel modules:
    'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  ...' /
    'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build ...'."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            m = re.search(
                r"Kernel Module(?:\s+for\s+\S+)?\s+(\d{1,9}\.\d{1,9}(?:\.\d{1,9})?)(?!\d)", line
            )
            if m:
                return m.group(1)
            return _version_token(line.split(":", 1)[1])
    return None


def parse_nvcc_version(text: str) -> str | None:
    """`nvcc --version` -> '12.4' (from 'Cuda compilation tools, release 12.4, V12.4.131')."""
    m = re.search(r"release (\d{1,9}\.\d{1,9})(?!\d)", text)
    return m.group(1) if m else None


def parse_topology_nvlink(text: str) -> bool | None:
    """`nvidia-smi topo -m` -> True when any GPU pair is joined by NVLink (an `NV<n>` cell).
    None when the text has no GPU matrix at all."""
    text = _ANSI.sub("", text)
    rows = [ln for ln in text.splitlines() if re.match(r"^GPU\d+\s", ln)]
    if not rows:
        return None
    return any(re.search(r"\bNV\d+\b", row) for row in rows)
