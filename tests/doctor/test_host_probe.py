"""Host probe: every real nvidia-smi capture parses to the driver, CUDA and GPUs it shows; the probe
falls back NVML -> nvidia-smi XML -> table + csv -> /proc; no driver is a fact, not an exception;
a recorded host replays to the same facts; overrides plan for another machine."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from smi_captures import strip_command_line

from envtool.adapters.host.host_probe import probe_host
from envtool.adapters.proc import ProcResult
from envtool.core import host_record, nvidia_smi
from envtool.core.checks import check_nvidia_driver
from envtool.core.facts import EnvFacts, HostFacts
from envtool.core.host_record import apply_overrides, facts_from_record
from envtool.errors import UsageError

# ---------------------------------------------------------------- helpers over the real captures

# capture name -> (driver, CUDA) as its nvidia-smi header shows (fixtures/nvidia-smi/SOURCES.md)
CAPTURES = {
    "linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05": ("595.71.05", "13.2"),
    "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04": ("610.57.04", "13.3"),
    "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05": ("595.71.05", "13.2"),
    "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01": ("590.48.01", "13.1"),
    "linux-x86_64__nvidia-h100-mig__590.48.01": ("590.48.01", "13.1"),
    "linux-x86_64__nvidia-h200-mig__590.48.01": ("590.48.01", "13.1"),
    "linux-x86_64__nvidia-h200__590.48.01": ("590.48.01", "13.1"),
    "linux-x86_64__nvidia-l40s__595.80": ("595.80", "13.2"),
    "windows-x86_64__nvidia-geforce-rtx-2080-super__591.86": ("591.86", "13.1"),
    "windows-x86_64__nvidia-geforce-rtx-2080-super__610.62": ("610.62", "13.3"),
}
# capture name fragment -> (full product name, capability, memory MiB, MIG devices or None)
GPU_BY_CAPTURE = {
    "rtx-2080-super": ("NVIDIA GeForce RTX 2080 SUPER", "7.5", 8192, None),
    "rtx-4080-super": ("NVIDIA GeForce RTX 4080 SUPER", "8.9", 16376, None),
    "h100-80gb-hbm3": ("NVIDIA H100 80GB HBM3", "9.0", 81559, None),
    "h100-mig": ("NVIDIA H100 80GB HBM3", "9.0", 81559, 4),
    "h200-mig": ("NVIDIA H200", "9.0", 143771, 5),
    "h200__": ("NVIDIA H200", "9.0", 143771, None),
    "l40s": ("NVIDIA L40S", "8.9", 46068, None),
}


def expected_gpu(capture: str) -> tuple[str, str, int, int | None]:
    return next(v for k, v in GPU_BY_CAPTURE.items() if k in capture)


def capture_sections(text: str) -> dict[str, str]:
    """Split a raw capture into {'idle :: query (-q)': body, ...} (the first one of each label)."""
    sections: dict[str, str] = {}
    parts = re.split(r"^#{20,}\n# (.+?)\n# \$ .*\n#{20,}\n", text, flags=re.M)
    for label, body in zip(parts[1::2], parts[2::2], strict=True):
        sections.setdefault(label.strip(), body)
    return sections


def ok(stdout: str) -> ProcResult:
    return ProcResult(("x",), 0, stdout, "")


FAILED = ProcResult(
    ("x",), 9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
)
MISSING = ProcResult(("x",), None, "", "No such file or directory", missing=True)


class FakeRunner:
    """Serves recorded outputs by argv (exact, or by a prefix of two or more words): the host as
    captured, without the host. Anything else is a missing program."""

    def __init__(self, answers: dict[tuple[str, ...], ProcResult]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: list[str], **_: object) -> ProcResult:
        key = tuple(argv)
        self.calls.append(key)
        if key in self.answers:
            return self.answers[key]
        for prefix, answer in self.answers.items():
            if len(prefix) > 1 and key[: len(prefix)] == prefix:
                return answer
        return MISSING


def smi_runner(
    xml: str | None = None,
    table: str | None = None,
    csv: str | None = None,
    topo: str | None = None,
) -> FakeRunner:
    """nvidia-smi that answers with captures; a missing capture answers like a broken driver."""
    return FakeRunner(
        {
            ("nvidia-smi", "-q", "-x"): ok(xml) if xml else FAILED,
            ("nvidia-smi",): ok(table) if table else FAILED,
            ("nvidia-smi", "--query-gpu=" + ",".join(nvidia_smi.QUERY_FIELDS)): ok(csv)
            if csv
            else FAILED,
            ("nvidia-smi", "topo", "-m"): ok(topo) if topo else FAILED,
        }
    )


NO_ENV: dict[str, str] = {}


# ---------------------------------------------------------------- parsers on every real capture


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_extracted_outputs_parse_to_the_header_driver_cuda_and_gpu(
    fixtures: Path, capture: str
) -> None:
    d = fixtures / "nvidia-smi" / "extracted" / capture
    driver, cuda = CAPTURES[capture]
    name, cap, mem, mig = expected_gpu(capture)
    for phase in ("idle", "load"):
        table = nvidia_smi.parse_smi_table(
            strip_command_line((d / f"{phase}__plain.txt").read_text())
        )
        q = nvidia_smi.parse_smi_query_text(strip_command_line((d / f"{phase}__q.txt").read_text()))
        csv = nvidia_smi.parse_query_csv(
            strip_command_line((d / f"{phase}__query-gpu.csv").read_text())
        )
        for report in (table, q):
            assert (report.driver_version, report.driver_cuda) == (driver, cuda)
        assert csv.driver_version == driver
        for report in (table, q, csv):
            assert len(report.gpus) == 1
            gpu = report.gpus[0]
            assert (gpu.capability, gpu.memory_mib) == (cap, mem)
            assert gpu.mig_enabled is (mig is not None)
            assert gpu.bus_id and re.fullmatch(
                r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0", gpu.bus_id
            )
        assert q.gpus[0].name == csv.gpus[0].name == name
        assert name.startswith(table.gpus[0].name.removesuffix("...").strip())  # table truncates
        if mig is not None:  # the table and -q list the MIG devices; the csv cannot
            assert table.gpus[0].mig_devices == q.gpus[0].mig_devices == mig
        assert csv.gpus[0].uuid == q.gpus[0].uuid == "GPU-00000000-0000-0000-0000-000000000000"
    version = nvidia_smi.parse_smi_version(strip_command_line((d / "version.txt").read_text()))
    assert (version.driver_version, version.driver_cuda) == (driver, cuda)


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_raw_captures_parse_like_their_extracted_sections(fixtures: Path, capture: str) -> None:
    sections = capture_sections(
        (fixtures / "nvidia-smi" / "captures" / f"{capture}.txt").read_text()
    )
    driver, cuda = CAPTURES[capture]
    for phase in ("idle", "load"):
        table = nvidia_smi.parse_smi_table(sections[f"{phase} :: nvidia-smi (default table)"])
        q = nvidia_smi.parse_smi_query_text(sections[f"{phase} :: query (-q)"])
        assert (
            (table.driver_version, table.driver_cuda)
            == (q.driver_version, q.driver_cuda)
            == (driver, cuda)
        )
        assert q.gpus[0].name == expected_gpu(capture)[0]
    # single-GPU machines: a matrix without NVLink; Windows nvidia-smi 591 rejects `topo -m`
    topo = sections["capabilities :: topo -m"]
    expected = None if "Option -m is missing its value" in topo else False
    assert nvidia_smi.parse_topology_nvlink(topo) is expected


def test_610_drivers_renamed_fields_are_read_from_new_names_not_deprecated_text(
    fixtures: Path,
) -> None:
    d = (
        fixtures
        / "nvidia-smi"
        / "extracted"
        / "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04"
    )
    table_text = (d / "idle__plain.txt").read_text()
    q_text = (d / "idle__q.txt").read_text()
    assert "KMD Version" in table_text and "Driver Version" not in table_text
    assert "Driver Version" in q_text and "[Deprecated" in q_text
    assert nvidia_smi.parse_smi_table(table_text).driver_cuda == "13.3"
    q = nvidia_smi.parse_smi_query_text(q_text)
    assert (q.driver_version, q.driver_cuda) == ("610.57.04", "13.3")
    v = nvidia_smi.parse_smi_version((d / "version.txt").read_text())
    assert (v.driver_version, v.driver_cuda) == ("610.57.04", "13.3")


# file -> (driver, CUDA, product name, memory MiB, capability (table fallback), MIG on)
XML = {
    "a100-sxm4-v12.xml": ("535.54.03", "12.2", "NVIDIA A100-SXM4-80GB", 81920, "8.0", True),
    "a10g.xml": ("515.105.01", "11.7", "NVIDIA A10G", 23028, "8.6", False),
    "gtx-1070-ti.xml": (None, None, "GeForce GTX 1070 Ti", 4096, "6.1", False),
    "gtx-1660-ti.xml": ("418.43", "10.1", "Graphics Device", 5912, None, False),
    "quadro-p2000-v12.xml": ("525.125.06", "12.0", "Quadro P2000", 5120, "6.1", False),
    "quadro-p400.xml": ("418.43", "10.1", "Quadro P400", 1998, "6.1", False),
    "rtx-3060-v12.xml": ("570.124.04", "12.8", "NVIDIA GeForce RTX 3060", 12288, "8.6", False),
    "rtx-3080-v12.xml": ("536.40", "12.2", "NVIDIA GeForce RTX 3080", 10240, "8.6", False),
    "rtx-3080-v13.xml": ("595.58.03", "13.2", "NVIDIA GeForce RTX 3080", 10240, "8.6", False),
    "rtx-3090-v12.xml": ("525.147.05", "12.0", "NVIDIA GeForce RTX 3090", 24576, "8.6", False),
    "rtx-4000-sff-ada-v13.xml": (
        "595.84",
        "13.2",
        "NVIDIA RTX 4000 SFF Ada Generation",
        20475,
        "8.9",
        False,
    ),
    "tesla-t4.xml": ("515.105.01", "11.7", "Tesla T4", 15360, "7.5", False),
}


def test_every_xml_fixture_is_covered(fixtures: Path) -> None:
    assert sorted(p.name for p in (fixtures / "nvidia-smi" / "xml").glob("*.xml")) == sorted(XML)


@pytest.mark.parametrize("name", sorted(XML))
def test_xml_captures(fixtures: Path, name: str) -> None:
    driver, cuda, product, mem, cap, mig = XML[name]
    report = nvidia_smi.parse_smi_xml((fixtures / "nvidia-smi" / "xml" / name).read_text())
    assert (report.driver_version, report.driver_cuda) == (driver, cuda)
    assert [(g.name, g.memory_mib, g.capability, g.mig_enabled) for g in report.gpus] == [
        (product, mem, cap, mig)
    ]
    if mig:  # the A100 file lists its MIG instances
        assert report.gpus[0].mig_devices == 4


def test_xml_parser_rejects_text_that_is_not_nvidia_smi_xml() -> None:
    with pytest.raises(ValueError, match="not nvidia-smi XML"):
        nvidia_smi.parse_smi_xml(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        )


def test_h200_host_every_file_says_two_h200_driver_580_cuda_13(fixtures: Path) -> None:
    h = fixtures / "h200-x2-host"
    reports = {
        "xml": nvidia_smi.parse_smi_xml((h / "nvidia-smi-q.xml").read_text()),
        "table": nvidia_smi.parse_smi_table((h / "nvidia-smi.txt").read_text()),
        "csv": nvidia_smi.parse_query_csv((h / "query.csv").read_text()),
    }
    for kind, r in reports.items():
        assert r.driver_version == "580.159.04", kind
        assert [(g.index, g.name, g.capability, g.memory_mib, g.mig_enabled) for g in r.gpus] == [
            (0, "NVIDIA H200", "9.0", 143771, False),
            (1, "NVIDIA H200", "9.0", 143771, False),
        ], kind
        assert [g.bus_id for g in r.gpus] == ["00000000:00:06.0", "00000000:00:07.0"], kind
    assert reports["xml"].driver_cuda == reports["table"].driver_cuda == "13.0"
    assert nvidia_smi.parse_topology_nvlink((h / "topo.txt").read_text()) is True


def test_h200_record_directory_replays_to_full_facts(fixtures: Path) -> None:
    """The fixture folder uses the record file names, so `doctor --replay` can read it as is."""
    raw = {p.name: p.read_text() for p in (fixtures / "h200-x2-host").iterdir()}
    facts = facts_from_record(raw)
    assert (facts.driver_version, facts.driver_cuda, facts.source) == (
        "580.159.04",
        "13.0",
        "nvidia-smi-xml",
    )
    assert [g.name for g in facts.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert facts.nvlink is True and "NV18" in (facts.topology or "")


@pytest.mark.parametrize(
    "name, cap",
    [
        ("NVIDIA H200", "9.0"),
        ("NVIDIA B200", "10.0"),
        ("NVIDIA GeForce RTX 5090", "12.0"),
        ("Tesla V100-SXM2-16GB", "7.0"),
        ("Tesla P100-PCIE-16GB", "6.0"),
        ("Tesla K80", "3.7"),
        ("NVIDIA TITAN Xp", "6.1"),
        ("NVIDIA A40", "8.6"),
        ("Graphics Device", None),
    ],
)
def test_capability_fallback_table(name: str, cap: str | None) -> None:
    assert nvidia_smi.capability_from_name(name) == cap


def test_proc_and_nvcc_text() -> None:
    # Formats of the proprietary and the open kernel module, and nvcc 13.0 on this build machine.
    assert (
        nvidia_smi.parse_proc_driver_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue Jun  6 22:20:39 UTC 2023\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
        )
        == "535.54.03"
    )
    assert (
        nvidia_smi.parse_proc_driver_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16-I1-N07-12-3)\n"
        )
        == "580.159.04"
    )
    assert (
        nvidia_smi.parse_nvcc_version(
            "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
        )
        == "13.0"
    )


# ---------------------------------------------------------------- the probe, on recorded hosts


def h200_runner(fixtures: Path, xml: bool = True) -> FakeRunner:
    h = fixtures / "h200-x2-host"
    return smi_runner(
        xml=(h / "nvidia-smi-q.xml").read_text() if xml else None,
        table=(h / "nvidia-smi.txt").read_text(),
        csv=(h / "query.csv").read_text(),
        topo=(h / "topo.txt").read_text(),
    )


def test_probe_without_nvml_reads_nvidia_smi_xml_and_topology(
    fixtures: Path, tmp_path: Path
) -> None:
    runner = h200_runner(fixtures)
    facts = probe_host(NO_ENV, runner=runner, nvml=None, proc_root=tmp_path)
    assert (facts.driver_version, facts.driver_cuda, facts.source) == (
        "580.159.04",
        "13.0",
        "nvidia-smi-xml",
    )
    assert [(g.name, g.capability) for g in facts.gpus] == [("NVIDIA H200", "9.0")] * 2
    assert facts.nvlink is True
    assert ("nvidia-smi", "topo", "-m") in runner.calls
    assert ("nvidia-smi",) not in runner.calls  # XML was enough


def test_probe_falls_back_to_table_plus_csv_when_xml_fails(fixtures: Path, tmp_path: Path) -> None:
    d = (
        fixtures
        / "nvidia-smi"
        / "extracted"
        / "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04"
    )
    runner = smi_runner(
        table=strip_command_line((d / "idle__plain.txt").read_text()),
        csv=strip_command_line((d / "idle__query-gpu.csv").read_text()),
    )
    facts = probe_host(NO_ENV, runner=runner, nvml=None, proc_root=tmp_path)
    assert (facts.driver_version, facts.driver_cuda, facts.source) == (
        "610.57.04",
        "13.3",
        "nvidia-smi",
    )
    # full name and capability come from the csv; the table alone says 'NVIDIA GeForce RTX 2080 ...'
    assert [(g.name, g.capability, g.memory_mib) for g in facts.gpus] == [
        ("NVIDIA GeForce RTX 2080 SUPER", "7.5", 8192)
    ]
    assert any("nvidia-smi -q -x" in e for e in facts.probe_errors)
    assert ("nvidia-smi", "topo", "-m") not in runner.calls  # one GPU: no topology


class FakeNvml:
    """NVML's API (the subset envtool calls), answering what a recorded host showed."""

    def __init__(
        self, driver: str, cuda_int: int, devices: list[dict], fail: Exception | None = None
    ) -> None:
        import pynvml

        self.pynvml, self.driver, self.cuda_int, self.devices, self.fail = (
            pynvml,
            driver,
            cuda_int,
            devices,
            fail,
        )
        self.NVML_NVLINK_MAX_LINKS = 18
        self.shutdown = 0

    def _err(self, code: int) -> Exception:
        return self.pynvml.NVMLError(code)

    def nvmlInit(self) -> None:
        if self.fail:
            raise self.fail

    def nvmlShutdown(self) -> None:
        self.shutdown += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_int

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.devices[h]["name"].encode()  # older bindings return bytes

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        major, minor = self.devices[h]["cap"].split(".")
        return int(major), int(minor)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(total=self.devices[h]["mib"] * 1024 * 1024)

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.devices[h]["uuid"]

    def nvmlDeviceGetPciInfo(self, h: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(busId=self.devices[h]["bus"])

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        if self.devices[h].get("mig") is None:
            raise self._err(self.pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [1, 1] if self.devices[h]["mig"] else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, j: int) -> tuple[int, int]:
        if j >= (self.devices[h].get("mig") or 0):
            raise self._err(self.pynvml.NVML_ERROR_NOT_FOUND)
        return (h, j)

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= self.devices[h].get("links", 0):
            raise self._err(self.pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 1


def nvml_from_h200_capture(fixtures: Path) -> FakeNvml:
    """Build the fake from query.csv + the table header of the real 2x H200 host."""
    h = fixtures / "h200-x2-host"
    csv = nvidia_smi.parse_query_csv((h / "query.csv").read_text())
    cuda = nvidia_smi.parse_smi_table((h / "nvidia-smi.txt").read_text()).driver_cuda
    major, minor = cuda.split(".")
    links = len(re.findall(r"NV18", (h / "topo.txt").read_text())) and 18
    return FakeNvml(
        csv.driver_version,
        int(major) * 1000 + int(minor) * 10,
        [
            {
                "name": g.name,
                "cap": g.capability,
                "mib": g.memory_mib,
                "uuid": g.uuid or "GPU-x",
                "bus": g.bus_id,
                "mig": False,
                "links": links,
            }
            for g in csv.gpus
        ],
    )


def test_probe_prefers_nvml_and_runs_nvidia_smi_only_for_topology(
    fixtures: Path, tmp_path: Path
) -> None:
    nvml = nvml_from_h200_capture(fixtures)
    runner = h200_runner(fixtures)
    facts = probe_host(NO_ENV, runner=runner, nvml=nvml, proc_root=tmp_path)
    assert (facts.driver_version, facts.driver_cuda, facts.source) == ("580.159.04", "13.0", "nvml")
    assert [(g.name, g.capability, g.memory_mib, g.bus_id) for g in facts.gpus] == [
        ("NVIDIA H200", "9.0", 143771, "00000000:00:06.0"),
        ("NVIDIA H200", "9.0", 143771, "00000000:00:07.0"),
    ]
    assert facts.nvlink is True
    assert [c for c in runner.calls if c[0] == "nvidia-smi"] == [("nvidia-smi", "topo", "-m")]
    assert nvml.shutdown == 1
    assert facts.driver_hung is False


def test_nvml_reports_mig_devices(fixtures: Path, tmp_path: Path) -> None:
    # The MIG H100 capture: 4 MIG devices (nvidia-smi -L), NVLink queries unsupported in MIG mode.
    d = fixtures / "nvidia-smi" / "extracted" / "linux-x86_64__nvidia-h100-mig__590.48.01"
    mig_count = sum(
        1 for ln in (d / "L.txt").read_text().splitlines() if ln.strip().startswith("MIG ")
    )
    nvml = FakeNvml(
        "590.48.01",
        13010,
        [
            {
                "name": "NVIDIA H100 80GB HBM3",
                "cap": "9.0",
                "mib": 81559,
                "uuid": "GPU-0",
                "bus": "00000000:00:09.0",
                "mig": mig_count,
            }
        ],
    )
    facts = probe_host(NO_ENV, runner=FakeRunner({}), nvml=nvml, proc_root=tmp_path)
    assert facts.driver_cuda == "13.1"
    assert (facts.gpus[0].mig_enabled, facts.gpus[0].mig_devices) == (True, 4)
    assert facts.nvlink is None


def test_nvml_failure_falls_back_to_nvidia_smi(fixtures: Path, tmp_path: Path) -> None:
    import pynvml

    nvml = FakeNvml("", 0, [], fail=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    facts = probe_host(NO_ENV, runner=h200_runner(fixtures), nvml=nvml, proc_root=tmp_path)
    assert facts.source == "nvidia-smi-xml" and facts.driver_version == "580.159.04"
    assert any(e.startswith("NVML:") and "Driver Not Loaded" in e for e in facts.probe_errors)


# ---------------------------------------------------------------- a wedged driver (NVML hangs)

PROC_580 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(dvs-builder@U16-I1-N07-12-3)\n"
)


def write_proc_version(proc_root: Path, text: str = PROC_580) -> None:
    (proc_root / "driver" / "nvidia").mkdir(parents=True)
    (proc_root / "driver" / "nvidia" / "version").write_text(text)


def wedge(nvml: FakeNvml, method: str, release: threading.Event) -> None:
    """Make one NVML call block until `release` is set, as a call into a hung driver does."""
    original = getattr(nvml, method)

    def blocked(*args: object) -> object:
        release.wait()
        return original(*args)

    setattr(nvml, method, blocked)


def returns(fn: Callable[[], HostFacts]) -> HostFacts:
    """fn() from a helper thread: a probe that hangs fails the test instead of hanging the suite
    (a guard for a regression, not a speed limit)."""
    out: dict[str, object] = {}

    def call() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = exc

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(60)
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    assert "value" in out, "probe_host never returned: NVML's wait is not bounded"
    return out["value"]  # type: ignore[return-value]


@pytest.mark.parametrize("hang_at", ["nvmlInit", "nvmlDeviceGetName"])
def test_hung_nvml_gives_the_proc_driver_no_nvidia_smi_and_a_failing_verdict(
    fixtures: Path, tmp_path: Path, hang_at: str
) -> None:
    release = threading.Event()
    nvml = nvml_from_h200_capture(fixtures)
    wedge(nvml, hang_at, release)
    write_proc_version(tmp_path)
    # This nvidia-smi would answer: only skipping it leaves it unasked.
    runner = h200_runner(fixtures)
    record: dict[str, str] = {}
    try:
        facts = returns(
            lambda: probe_host(
                NO_ENV,
                runner=runner,
                nvml=nvml,
                record=record,
                proc_root=tmp_path,
                nvml_timeout=0.2,
            )
        )
    finally:
        release.set()  # lets the NVML thread finish
    assert (facts.driver_version, facts.driver_cuda, facts.source) == ("580.159.04", "13.0", "proc")
    assert facts.driver_hung is True and facts.gpus == []
    assert "NVML: no answer in 0.2 s — the driver looks hung" in facts.probe_errors
    # nvidia-smi uses the same driver: not one call, so no 30 s time-outs (nor topology).
    assert [c for c in runner.calls if c[0] == "nvidia-smi"] == []
    verdict = check_nvidia_driver(facts, EnvFacts())
    assert verdict.status == "fail" and "not answering" in verdict.summary
    assert "dmesg | grep -i xid" in (verdict.fix or "") and "nvidia-smi -r" in (verdict.fix or "")
    # --record / --replay: the raw files say "hung", the replay says so too, and so does host.json.
    assert set(record) <= set(host_record.RECORD_FILES)
    assert facts_from_record(record) == facts
    assert HostFacts.from_dict(json.loads(json.dumps(facts.to_dict()))) == facts


def test_nvml_time_out_comes_from_the_environment_and_a_bad_value_is_a_usage_error(
    fixtures: Path, tmp_path: Path
) -> None:
    release = threading.Event()
    nvml = nvml_from_h200_capture(fixtures)
    wedge(nvml, "nvmlInit", release)
    try:
        facts = returns(
            lambda: probe_host(
                {"ENVTOOL_NVML_TIMEOUT": "0.2"},
                runner=FakeRunner({}),
                nvml=nvml,
                proc_root=tmp_path,
            )
        )
    finally:
        release.set()
    assert facts.driver_hung is True and facts.driver_version is None
    assert "NVML: no answer in 0.2 s — the driver looks hung" in facts.probe_errors
    for bad in ("soon", "0", "-5", "nan", "inf"):
        with pytest.raises(UsageError, match="ENVTOOL_NVML_TIMEOUT"):
            probe_host({"ENVTOOL_NVML_TIMEOUT": bad}, runner=FakeRunner({}), nvml=None)


def test_a_huge_nvml_time_out_means_wait_long_not_a_traceback(
    fixtures: Path, tmp_path: Path
) -> None:
    # 1e10 s is past what a thread wait accepts (threading.TIMEOUT_MAX): it used to raise
    # OverflowError out of the probe; it is a user saying "wait as long as it takes".
    facts = probe_host(
        {"ENVTOOL_NVML_TIMEOUT": "1e10"},
        runner=h200_runner(fixtures),
        nvml=nvml_from_h200_capture(fixtures),
        proc_root=tmp_path,
    )
    assert (facts.driver_version, facts.source, facts.driver_hung) == ("580.159.04", "nvml", False)


@pytest.mark.integration
def test_a_thread_stuck_in_nvml_does_not_keep_the_process_alive_at_exit(tmp_path: Path) -> None:
    # An NVML call that never returns (the Event is never set), then a normal interpreter exit.
    code = """
import pathlib, sys, threading
from envtool.adapters.host.host_probe import probe_host
from envtool.adapters.proc import ProcResult

class Wedged:
    def nvmlInit(self):
        threading.Event().wait()

def runner(argv, **_):
    return ProcResult(tuple(argv), None, missing=True)

f = probe_host({}, runner=runner, nvml=Wedged(), proc_root=pathlib.Path(sys.argv[1]), nvml_timeout=0.2)
print("hung" if f.driver_hung else "answered")
"""
    try:
        res = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the process did not exit: the NVML thread holds it (not a daemon thread?)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "hung"


def test_proc_alone_gives_the_driver_and_a_table_cuda(tmp_path: Path) -> None:
    (tmp_path / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.182.03  Fri Feb 24 03:29:56 UTC 2023\n"
    )
    facts = probe_host(NO_ENV, runner=FakeRunner({}), nvml=None, proc_root=tmp_path)
    assert (facts.driver_version, facts.source) == ("470.182.03", "proc")
    assert facts.driver_cuda == "11.4"  # the GA driver table: 470.42.01 <= 470.182.03 < 495
    assert "nvidia-smi: not found on PATH" in facts.probe_errors


def test_no_driver_is_a_fact_with_every_attempt_named(tmp_path: Path) -> None:
    import pynvml

    nvml = FakeNvml("", 0, [], fail=pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    facts = probe_host(NO_ENV, runner=FakeRunner({}), nvml=nvml, proc_root=tmp_path)
    assert facts.driver_version is None and not facts.has_driver and facts.gpus == []
    assert facts.no_driver_reason is not None
    for tried in ("NVML", "driver/nvidia/version: absent", "nvidia-smi: not found"):
        assert tried in facts.no_driver_reason


def test_real_probe_on_this_machine_without_a_driver_does_not_raise() -> None:
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver")
    facts = probe_host()
    assert facts.driver_version is None
    assert facts.no_driver_reason and facts.no_driver_reason.startswith("no NVIDIA driver:")
    assert facts.shm_bytes and facts.shm_bytes > 0  # /dev/shm exists on Linux


def test_record_then_replay_gives_the_same_facts(fixtures: Path, tmp_path: Path) -> None:
    record: dict[str, str] = {}
    env = {"CUDA_VISIBLE_DEVICES": "1", "CONDA_OVERRIDE_CUDA": "12.4"}
    live = probe_host(
        env, runner=h200_runner(fixtures, xml=False), nvml=None, record=record, proc_root=tmp_path
    )
    assert set(record) <= set(host_record.RECORD_FILES)
    assert {"nvidia-smi.txt", "query.csv", "topo.txt", "env.json", "probe.json"} <= set(record)
    # through the file system, as doctor --record / --replay do
    rec_dir = tmp_path / "rec"
    rec_dir.mkdir()
    for name, text in record.items():
        (rec_dir / name).write_text(text)
    replayed = facts_from_record({p.name: p.read_text() for p in rec_dir.iterdir()})
    assert replayed == live
    assert live.cuda_visible_devices == "1" and live.driver_cuda == "12.4"


# ---------------------------------------------------------------- env-derived facts and overrides


def test_cuda_visible_devices_unset_empty_and_set(tmp_path: Path) -> None:
    runner = FakeRunner({})
    unset = probe_host({}, runner=runner, nvml=None, proc_root=tmp_path)
    empty = probe_host({"CUDA_VISIBLE_DEVICES": ""}, runner=runner, nvml=None, proc_root=tmp_path)
    some = probe_host({"CUDA_VISIBLE_DEVICES": "0,1"}, runner=runner, nvml=None, proc_root=tmp_path)
    assert (unset.cuda_visible_devices, empty.cuda_visible_devices, some.cuda_visible_devices) == (
        None,
        "",
        "0,1",
    )


def test_ld_library_path_hits_and_nvcc(tmp_path: Path) -> None:
    lib1, lib2 = tmp_path / "cuda" / "lib64", tmp_path / "conda" / "lib"
    for d, names in (
        (lib1, ["libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libfoo.so"]),
        (lib2, ["libnccl.so.2", "libcuda.so.1"]),
    ):
        d.mkdir(parents=True)
        for n in names:
            (d / n).write_text("")
    home = tmp_path / "cuda"
    (home / "bin").mkdir()
    (home / "bin" / "nvcc").write_text("")
    nvcc_out = (
        "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, V12.4.131\n"
    )
    runner = FakeRunner({(str(home / "bin" / "nvcc"), "--version"): ok(nvcc_out)})
    env = {"LD_LIBRARY_PATH": f"{lib1}:{tmp_path / 'missing'}:{lib2}", "CUDA_HOME": str(home)}
    facts = probe_host(env, runner=runner, nvml=None, proc_root=tmp_path)
    assert facts.ld_library_hits == [
        str(lib1 / "libcudart.so.12"),
        str(lib1 / "libcublas.so.12"),
        str(lib2 / "libnccl.so.2"),
        str(lib2 / "libcuda.so.1"),
    ]
    assert (facts.nvcc_version, facts.cuda_home) == ("12.4", str(home))
    assert facts.ld_library_path == env["LD_LIBRARY_PATH"]


def test_env_overrides_make_a_virtual_driver_on_a_host_without_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA", "12.1")
    monkeypatch.setenv("ENVTOOL_DRIVER_VERSION", "530.30.02")
    facts = probe_host(runner=FakeRunner({}), nvml=None, proc_root=tmp_path)
    assert (facts.driver_version, facts.driver_cuda, facts.source) == (
        "530.30.02",
        "12.1",
        "override",
    )
    assert facts.overrides == {"CONDA_OVERRIDE_CUDA": "12.1", "ENVTOOL_DRIVER_VERSION": "530.30.02"}
    assert facts.has_driver and facts.no_driver_reason is None


def test_cuda_override_alone_on_a_driverless_host_uses_the_minimum_driver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA", "11.8")
    monkeypatch.delenv("ENVTOOL_DRIVER_VERSION", raising=False)
    facts = probe_host(runner=FakeRunner({}), nvml=None, proc_root=tmp_path)
    assert (facts.driver_cuda, facts.driver_version, facts.source) == (
        "11.8",
        "520.61.05",
        "override",
    )


def test_cuda_override_on_a_real_host_keeps_its_driver_and_gpus(
    fixtures: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA", "12.4")
    monkeypatch.delenv("ENVTOOL_DRIVER_VERSION", raising=False)
    facts = probe_host(runner=h200_runner(fixtures), nvml=None, proc_root=tmp_path)
    assert (facts.driver_version, facts.driver_cuda, facts.source) == (
        "580.159.04",
        "12.4",
        "nvidia-smi-xml",
    )
    assert len(facts.gpus) == 2 and facts.overrides == {"CONDA_OVERRIDE_CUDA": "12.4"}


def test_empty_conda_override_cuda_plans_for_cpu(fixtures: Path, tmp_path: Path) -> None:
    facts = probe_host(
        {"CONDA_OVERRIDE_CUDA": ""}, runner=h200_runner(fixtures), nvml=None, proc_root=tmp_path
    )
    assert facts.driver_version is None and facts.driver_cuda is None
    assert "CONDA_OVERRIDE_CUDA" in (facts.no_driver_reason or "")


def test_malformed_override_is_a_usage_error_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="CONDA_OVERRIDE_CUDA='twelve'"):
        probe_host(
            {"CONDA_OVERRIDE_CUDA": "twelve"}, runner=FakeRunner({}), nvml=None, proc_root=tmp_path
        )
    with pytest.raises(UsageError, match="--driver"):
        apply_overrides(facts_from_record({}), driver="latest")


def test_apply_overrides_driver_flag_derives_its_cuda_and_leaves_input_alone(
    fixtures: Path, tmp_path: Path
) -> None:
    host = probe_host(NO_ENV, runner=h200_runner(fixtures), nvml=None, proc_root=tmp_path)
    planned = apply_overrides(host, driver="470.82.01")
    assert (planned.driver_version, planned.driver_cuda) == ("470.82.01", "11.4")
    assert planned.overrides == {"ENVTOOL_DRIVER_VERSION": "470.82.01"}
    assert (host.driver_version, host.driver_cuda, host.overrides) == ("580.159.04", "13.0", {})


def test_facts_round_trip_through_json(fixtures: Path, tmp_path: Path) -> None:
    from envtool.core.facts import HostFacts

    facts = probe_host(NO_ENV, runner=h200_runner(fixtures), nvml=None, proc_root=tmp_path)
    assert HostFacts.from_dict(json.loads(json.dumps(facts.to_dict()))) == facts


def test_nvidia_smi_that_cannot_reach_the_driver_is_named_in_the_reason(tmp_path: Path) -> None:
    # What nvidia-smi prints (exit 9) when the kernel module is not loaded.
    facts = probe_host(NO_ENV, runner=smi_runner(), nvml=None, proc_root=tmp_path)
    assert facts.driver_version is None
    assert "couldn't communicate with the NVIDIA driver" in (facts.no_driver_reason or "")
