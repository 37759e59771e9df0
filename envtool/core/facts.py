"""Recorded facts about a host and an environment. Probes fill them; doctor checks read them.

Plain dataclasses that round-trip through JSON, so a probe can be recorded on one machine
(`doctor --record`) and replayed on another (`doctor --replay`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class GpuFacts:
    index: int
    name: str
    capability: str | None = None  # "9.0"
    memory_mib: int | None = None
    uuid: str | None = None
    mig_enabled: bool = False
    mig_devices: int = 0
    bus_id: str | None = None


@dataclass
class HostFacts:
    """What the host's NVIDIA stack offers. `driver_version is None` means no usable NVIDIA driver."""

    platform: str = "linux-64"
    driver_version: str | None = None
    driver_cuda: str | None = None  # newest CUDA the driver supports, "13.0"
    source: str | None = None  # nvml | proc | nvidia-smi-xml | nvidia-smi | override
    no_driver_reason: str | None = None
    gpus: list[GpuFacts] = field(default_factory=list)
    cuda_visible_devices: str | None = None  # None = unset (all visible); "" = none visible
    shm_bytes: int | None = None
    nvcc_version: str | None = None  # "12.4"
    cuda_home: str | None = None
    ld_library_path: str | None = None
    ld_library_hits: list[str] = field(
        default_factory=list
    )  # libcudart/libnccl/libcuda found there
    topology: str | None = None  # `nvidia-smi topo -m` text
    nvlink: bool | None = None
    overrides: dict[str, str] = field(
        default_factory=dict
    )  # CONDA_OVERRIDE_CUDA, ENVTOOL_DRIVER_VERSION
    probe_errors: list[str] = field(default_factory=list)
    driver_hung: bool = False  # NVML gave no answer in time: a wedged driver (Xid 79, ...)

    @property
    def has_driver(self) -> bool:
        return self.driver_version is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostFacts:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["gpus"] = [GpuFacts(**g) for g in data.get("gpus", [])]
        return cls(**kwargs)


@dataclass
class TorchFacts:
    version: str | None = None  # "2.3.1+cu121"
    cuda: str | None = None  # torch.version.cuda
    cudnn: int | None = None
    nccl: str | None = None
    is_available: bool | None = None
    available_message: str | None = None  # warning/error torch gave on cuda.is_available()/init
    device_count: int | None = None
    arch_list: list[str] = field(default_factory=list)
    capabilities: list[str] = field(default_factory=list)  # ["9.0", "9.0"]
    path: str | None = None


@dataclass
class EnvFacts:
    """What the target environment holds, seen by its own python."""

    python_exe: str | None = None
    prefix: str | None = None
    name: str | None = None  # the env's name when the user named it (fixes then say it)
    status: str = "ok"  # ok | timeout | crashed | no-python | not-probed
    error: str | None = None
    python_version: str | None = None
    torch: TorchFacts | None = None
    torch_import_error: str | None = None
    conda_packages: dict[str, dict[str, str]] = field(
        default_factory=dict
    )  # name -> {version, build, channel}
    pip_torch: list[dict[str, str]] = field(
        default_factory=list
    )  # [{name, version, installer, location}]
    install_state: str | None = None  # complete | incomplete | None (not an envtool env)
    install_lock: str | None = None  # the lock the (last) install was from: the fix names it
    drift: dict[str, Any] | None = None  # verify result, when a lock exists

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EnvFacts:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        if data.get("torch") is not None:
            tknown = {f.name for f in fields(TorchFacts)}
            kwargs["torch"] = TorchFacts(**{k: v for k, v in data["torch"].items() if k in tknown})
        return cls(**kwargs)
