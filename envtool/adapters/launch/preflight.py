"""Multi-node pre-flight: before torchrun, every node checks in with the head on the rendezvous
port and compares a fingerprint (torch, CUDA, NCCL, lock hash) with it, every message
authenticated by the run's shared token (ENVTOOL_PREFLIGHT_TOKEN; docs/multi-node-security.md).

torchrun alone waits up to 900 s for a head that never starts or a port nobody listens on, and
a node with another torch fails late with an obscure collective error. The exchange itself is
preflight_script.py (standard library only: a --slurm batch script runs the same code with the
environment's python on every node); here it runs inside envtool, with envtool's bounded JSON
reader for what arrives from the network and the fingerprint read from the environment on disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envtool.adapters.launch import preflight_script as script
from envtool.errors import DiagnosedFailure, UsageError

compare = script.compare
TOKEN_VAR = script.TOKEN_VAR
SCRIPT = Path(script.__file__)


class PreflightFailure(DiagnosedFailure):
    """A node cannot take part: unreachable head, a missing node, a different fingerprint."""


def probe_fingerprint(prefix: Path | None, torch_version: str | None) -> dict[str, str | None]:
    """What every node must share, read without importing torch: torch and its CUDA build
    (torch/version.py), the NCCL package (conda-meta or a pip nvidia-nccl dist), the lock."""
    from envtool.adapters.host.env_probe import read_torch_static
    from envtool.adapters.launch.launcher import read_lock_hash

    facts = read_torch_static(prefix) if prefix is not None else None
    return {
        "torch": torch_version or (facts.version if facts else None),
        "cuda": facts.cuda if facts else None,
        "nccl": read_nccl_version(prefix),
        "lock": read_lock_hash(prefix),
    }


def read_nccl_version(prefix: Path | None) -> str | None:
    """NCCL's package version: conda's nccl-<version>-<build>.json, or pip's
    nvidia_nccl_cu<N>-<version>.dist-info; None for a CPU build (no NCCL package)."""
    if prefix is None:
        return None
    for meta in sorted((prefix / "conda-meta").glob("nccl-*.json")):
        parts = meta.name[: -len(".json")].rsplit("-", 2)
        if len(parts) == 3 and parts[0] == "nccl":
            return parts[1]
    from envtool.adapters.host.env_probe import site_packages_dirs

    for d in site_packages_dirs(prefix):
        for dist in sorted(d.glob("nvidia_nccl_cu*-*.dist-info")):
            return dist.name[: -len(".dist-info")].rsplit("-", 1)[1]
    return None


def _parse(line: bytes, source: str) -> Any:
    """A line from another node: envtool's strict reader (bounded depth, no duplicate keys)."""
    from envtool.core.safe_load import parse_json

    try:
        return parse_json(line, f"pre-flight message from {source}")
    except UsageError:
        return None


def read_token(environ: Mapping[str, str]) -> bytes:
    """The run's shared secret from ENVTOOL_PREFLIGHT_TOKEN; UsageError (exit 2, before anything
    starts) when it is missing or too short."""
    try:
        return script.check_token(environ.get(TOKEN_VAR))
    except script.PreflightError as exc:
        raise UsageError(exc.message, exc.hint) from None


def render_new_token() -> str:
    """A fresh token for `launch --dry-run` to print: 256 random bits."""
    import secrets

    return secrets.token_hex(32)


def run_head(
    host: str,
    port: int,
    nnodes: int,
    fingerprint: dict[str, Any],
    timeout: float,
    token: bytes,
) -> None:
    """Node 0: see preflight_script.run_head; dropped connections are noted on stderr. Raises
    PreflightFailure."""
    from envtool.output import note

    try:
        script.run_head(host, port, nnodes, fingerprint, timeout, token, parse=_parse, log=note)
    except script.PreflightError as exc:
        raise PreflightFailure(exc.message, exc.hint) from None


def run_node(
    host: str,
    port: int,
    node_rank: int | None,
    fingerprint: dict[str, Any],
    timeout: float,
    token: bytes,
) -> None:
    """Any other node: see preflight_script.run_node. Raises PreflightFailure."""
    try:
        script.run_node(host, port, node_rank, fingerprint, timeout, token, parse=_parse)
    except script.PreflightError as exc:
        raise PreflightFailure(exc.message, exc.hint) from None


def script_source() -> str:
    """preflight_script.py's text, for a batch script to run with `python -I -c`."""
    from envtool.adapters.files import read_text

    return read_text(SCRIPT, 1 << 20, what="pre-flight script")
