"""What a prefix holds: conda-meta/*.json records and pip dist-info, read from disk (no python run)."""

from __future__ import annotations

import json
import os
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from envtool.adapters.env_probe import site_packages_dirs
from envtool.core.drift import PackageId, diff_packages


def read_conda_meta(prefix: Path) -> list[dict[str, Any]]:
    """conda-meta/<name>-<version>-<build>.json, as conda, mamba and rattler write them."""
    out = []
    for meta in sorted((Path(prefix) / "conda-meta").glob("*.json")):
        if meta.name.startswith("envtool-"):
            continue
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or "name" not in data:
            continue
        out.append(data)
    return out


def read_pip_dists(
    prefix: Path, conda_records: list[dict[str, Any]] | None = None
) -> list[dict[str, str]]:
    """dist-info dirs in the prefix's site-packages not owned by a conda package
    (conda-built python packages ship dist-info too; those are conda's, not pip's)."""
    prefix = Path(prefix)
    records = read_conda_meta(prefix) if conda_records is None else conda_records
    owned = {f for r in records for f in r.get("files", [])}
    out = []
    for site in site_packages_dirs(prefix):
        for dist in sorted(site.glob("*.dist-info")):
            metadata = dist / "METADATA"
            if not metadata.is_file():
                continue
            if str(metadata.relative_to(prefix)) in owned:
                continue
            headers = HeaderParser().parsestr(metadata.read_text(errors="replace"))
            installer = (
                (dist / "INSTALLER").read_text().strip() if (dist / "INSTALLER").is_file() else ""
            )
            if installer == "conda":
                continue
            out.append(
                {
                    "name": headers.get("Name", dist.name.split("-")[0]),
                    "version": headers.get("Version", ""),
                    "installer": installer,
                    "location": str(site),
                }
            )
    return out


def read_installed_ids(
    prefix: Path, conda_records: list[dict[str, Any]] | None = None
) -> list[PackageId]:
    conda = read_conda_meta(prefix) if conda_records is None else conda_records
    ids = [PackageId(r["name"], str(r.get("version", "")), "conda", r.get("build")) for r in conda]
    ids += [PackageId(d["name"], d["version"], "pip") for d in read_pip_dists(prefix, conda)]
    return ids


def compute_drift(
    prefix: Path | str,
    lock_path: Path | str,
    platform: str | None = None,
    check_files: bool = False,
) -> dict[str, Any]:
    """Installed vs locked: {clean, missing, extra, changed} (doctor and `envtool verify`);
    with check_files also `damaged`: installed packages whose files are gone from disk."""
    from envtool.adapters.installer import current_platform
    from envtool.adapters.lock_io import read_lock

    lock = read_lock(Path(lock_path))
    plat = platform or current_platform()
    locked = [
        PackageId(p.name, p.version, p.manager, p.build or None)  # None: not compared
        for p in lock.for_platform(plat)
    ]
    records = read_conda_meta(Path(prefix))
    drift = diff_packages(read_installed_ids(Path(prefix), records), locked)
    if check_files:
        drift["damaged"] = damaged_packages(Path(prefix), records)
        drift["clean"] = drift["clean"] and not drift["damaged"]
    drift["platform"] = plat
    drift["lock_path"] = str(lock.path)
    return drift


def damaged_packages(prefix: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conda packages some of whose recorded files (conda-meta `files`) are gone from disk: a
    deleted file, a half-removed package. One lstat per file (~50k in a CUDA torch env)."""
    out = []
    for r in records:
        gone = [f for f in r.get("files", []) if not os.path.lexists(prefix / f)]
        if gone:
            out.append({"name": r["name"], "missing_files": len(gone), "first": gone[0]})
    return sorted(out, key=lambda row: row["name"])


def describe_env(prefix: Path) -> dict[str, Any]:
    """One row of `envtool list` / the head of `envtool info`: from files only, no python run."""
    from envtool.adapters.install_state import (
        read_incomplete_marker,
        read_install_state,
        read_state_record,
    )

    prefix = Path(prefix)
    state = read_install_state(prefix)
    record = read_state_record(prefix) or {}
    marker = read_incomplete_marker(prefix) or {}
    plan = record.get("plan") or {}
    conda = read_conda_meta(prefix)
    torch = next((r for r in conda if r["name"] in ("pytorch", "torch")), None)
    cuda_pkg = next(
        (r for r in conda if r["name"] in ("cuda-version", "pytorch-cuda", "cudatoolkit")), None
    )
    torch_label = f"{torch['version']} {torch.get('build', '')}".strip() if torch else None
    if torch_label is None:
        pip_torch = next(
            (d for d in read_pip_dists(prefix, conda) if d["name"].lower() == "torch"), None
        )
        torch_label = pip_torch["version"] + " (pip)" if pip_torch else None
    flavor = plan.get("envtool_flavor")
    cuda = plan.get("envtool_cuda") or (cuda_pkg["version"] if cuda_pkg else None)
    return {
        "name": prefix.name,
        "prefix": str(prefix),
        "state": state or "unknown",
        "flavor": flavor,
        "cuda": cuda,
        "torch": torch_label,
        "lock_sha256": record.get("lock_sha256")
        if state == "complete"
        else marker.get("lock_sha256"),
        "lock_path": record.get("lock_path") or marker.get("lock_path"),
        "installed_at": record.get("installed_at"),
        "conda_packages": len(conda),
    }
