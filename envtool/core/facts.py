"""Recorded facts about a host and an environment. Probes fill them; doctor checks read them.

Plain dataclasses that round-trip through JSON, so a probe can be recorded on one machine
(`doctor --record`) and replayed on another (`doctor --replay`).
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from typing import Any, Union

from envtool.errors import UsageError

# A recording is someone else's file: every value is checked against the field's type before a
# check reads it (a list where a version goes was a TypeError traceback). Strings are bounded:
# names, paths and versions to MAX_WORD, free text (topology, error messages) to MAX_TEXT.
MAX_WORD = 4096
MAX_TEXT = 1 << 20
_FREE_TEXT = {
    "topology",
    "error",
    "available_message",
    "torch_import_error",
    "ld_library_path",
    "no_driver_reason",
}
# A compute capability is "X.Y" (checks turn it into sm_XY).
_CAPABILITY = re.compile(r"\d{1,3}\.\d{1,3}")
_CAPABILITIES = {"capability", "capabilities"}
# Fields a check compares as versions: they must read as one (a 5000-digit "version" is refused).
_VERSIONS = {
    "driver_version",
    "driver_cuda",
    "nvcc_version",
    "python_version",
    "cuda",
    "version",
}


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
    def from_dict(cls, data: Any, source: str = "host.json") -> HostFacts:
        """From JSON (a recording): every field type-checked; a UsageError names `source` and
        the field otherwise."""
        return from_dict(cls, data, source)


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
    def from_dict(cls, data: Any, source: str = "env.json") -> EnvFacts:
        """From JSON (a recording): every field type-checked; a UsageError names `source` and
        the field otherwise."""
        return from_dict(cls, data, source)


# ------------------------------------------------------------------ typed reading of recordings

_T = typing.TypeVar("_T")


def from_dict(cls: type[_T], data: Any, source: str, where: str = "") -> _T:
    """A facts dataclass from JSON: unknown keys ignored (older/newer recordings), missing keys
    take the default, a present key must hold its field's type."""
    if not isinstance(data, Mapping):
        raise _bad(source, where or "the file", data, "a JSON object")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = check_value(
                data[f.name], hints[f.name], source, f"{where}{f.name}", f.name
            )
        elif f.default is MISSING and f.default_factory is MISSING:
            raise UsageError(
                f"{source}: {where}{f.name} is missing",
                "re-record it with `envtool doctor --record DIR`",
            )
    return cls(**kwargs)


def check_fields(
    data: Any, schema: Mapping[str, Any], source: str, where: str = ""
) -> dict[str, Any]:
    """A raw JSON object (a probe's own record file) checked against `schema` (key -> type):
    the keys present must hold their type; unknown keys are left as they are."""
    if not isinstance(data, Mapping):
        raise _bad(source, where or "the file", data, "a JSON object")
    out = dict(data)
    for key, hint in schema.items():
        if key in data:
            out[key] = check_value(data[key], hint, source, f"{where}{key}", key)
    return out


def check_value(value: Any, hint: Any, source: str, where: str, name: str = "") -> Any:
    """`value` if it fits the type `hint` (str, int, float, bool, None, list[X], dict[str, X],
    X | None, Any, a facts dataclass), else a one-line UsageError naming `source` and `where`.
    `name` (the field's own name) selects the string bounds and the version check."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        options = tuple(o for o in options if o is not type(None))
        if len(options) == 1:
            return check_value(value, options[0], source, where, name)
        for option in options:  # int | bool style unions: the first that fits
            try:
                return check_value(value, option, source, where, name)
            except UsageError:
                continue
        raise _bad(source, where, value, " or ".join(_type_name(o) for o in options))
    if hint is Any:
        return value
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        if not isinstance(value, list):
            raise _bad(source, where, value, f"a list of {_type_name(item)}")
        return [check_value(v, item, source, f"{where}[{i}]", name) for i, v in enumerate(value)]
    if origin is dict:
        _, item = typing.get_args(hint) or (str, Any)
        if not isinstance(value, Mapping):
            raise _bad(source, where, value, "a JSON object")
        out = {}
        for k, v in value.items():
            if len(k) > MAX_WORD:
                raise _bad(source, where, k, f"keys of at most {MAX_WORD} characters")
            out[k] = check_value(v, item, source, f"{where}.{_short(k)}", k)
        return out
    if is_dataclass(hint):
        return from_dict(hint, value, source, f"{where}.")  # type: ignore[type-var]
    if hint is bool:
        if not isinstance(value, bool):
            raise _bad(source, where, value, "true or false")
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise _bad(source, where, value, "an integer")
        return value
    if hint is float:
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            raise _bad(source, where, value, "a number")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise _bad(source, where, value, "a string")
        limit = MAX_TEXT if name in _FREE_TEXT else MAX_WORD
        if len(value) > limit:
            raise _bad(source, where, value, f"a string of at most {limit} characters")
        if name in _CAPABILITIES and not _CAPABILITY.fullmatch(value):
            raise _bad(source, where, value, 'a compute capability like "9.0"')
        if name in _VERSIONS and value:
            from envtool.core.versions import parse_version

            try:
                parse_version(value)
            except ValueError:
                raise _bad(source, where, value, "a version") from None
        return value
    raise TypeError(f"check_value: unsupported type {hint!r}")  # a programming error


def _type_name(hint: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def _short(value: Any, limit: int = 60) -> str:
    from envtool.core.shell_quote import printable

    text = repr(value)[: limit + 1]
    return printable(text if len(text) <= limit else text[: limit - 1] + "…")


def _bad(source: str, where: str, value: Any, expected: str) -> UsageError:
    kind = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        kind += f" {_short(value)}"
    return UsageError(
        f"{source}: {where} is {kind}, expected {expected}",
        "re-record it with `envtool doctor --record DIR` (the file was edited or is from a "
        "newer envtool)",
    )


# --- doctor --deep's results (what deep_script writes, `doctor --record` keeps in deep.json)

# What deep_script writes (and `doctor --record` keeps in deep.json): checked before the deep
# checks read it, so a replayed or a broken result is one line, not a TypeError in a check.
_MATMUL_SCHEMA: dict[str, Any] = {
    "torch": str | None,
    "cuda": str | None,
    "device_count": int | None,
    "size": int | None,
    "results": list[dict[str, Any]],
    "error": str | None,
}


_MATMUL_ROW_SCHEMA: dict[str, Any] = {
    "device": str,
    "dtype": str | None,
    "name": str | None,
    "rel_error": float,
    "tolerance": float | None,
    "ok": bool | None,
    "tflops": float | None,
    "error": str | None,
}


_ALLREDUCE_SCHEMA: dict[str, Any] = {
    "world_size": int | None,
    "backend": str | None,
    "nccl": str | None,
    "sum_exact": bool | None,
    "sizes": list[dict[str, Any]],
    "error": str | None,
    "skipped": str | None,
}


_SIZE_SCHEMA: dict[str, Any] = {
    "size_mib": float,
    "exact": bool | None,
    "time_us": float | None,
    "algbw_gbps": float,
    "busbw_gbps": float,
}


_SIZE_REQUIRED = ("size_mib", "algbw_gbps", "busbw_gbps")


def check_deep_record(data: Any, source: str) -> dict[str, Any]:
    """A --deep result ({"matmul", "allreduce", "skipped"}) with every value the checks read
    type-checked; a UsageError naming `source` and the field otherwise."""
    out = check_fields(
        data,
        {"matmul": dict[str, Any] | None, "allreduce": dict[str, Any] | None, "skipped": Any},
        source,
    )
    check_fields(out, {"skipped": str | None}, source)
    if out.get("matmul") is not None:
        mm = check_fields(out["matmul"], _MATMUL_SCHEMA, source, "matmul.")
        for i, row in enumerate(mm.get("results") or []):
            where = f"matmul.results[{i}]."
            check_fields(row, _MATMUL_ROW_SCHEMA, source, where)
            _require(
                row, ("device",) if row.get("error") else ("device", "rel_error"), source, where
            )
    if out.get("allreduce") is not None:
        ar = check_fields(out["allreduce"], _ALLREDUCE_SCHEMA, source, "allreduce.")
        for i, size in enumerate(ar.get("sizes") or []):
            where = f"allreduce.sizes[{i}]."
            check_fields(size, _SIZE_SCHEMA, source, where)
            _require(size, _SIZE_REQUIRED, source, where)
    return out


def _require(data: dict[str, Any], keys: tuple[str, ...], source: str, where: str) -> None:
    missing = [k for k in keys if data.get(k) is None]
    if missing:
        raise UsageError(
            f"{source}: {where}{missing[0]} is missing",
            "re-record it with `envtool doctor --deep --record DIR`",
        )
