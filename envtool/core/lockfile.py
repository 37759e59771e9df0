"""The lock model, before conda-lock's writer sees it: solved packages, the input hash that makes
`envtool lock` a no-op when nothing changed, and the plan recorded in `metadata.custom_metadata`.

Pure: the adapter (adapters/lock_io.py) turns these into conda-lock models and writes the file.
The file as read back is core/lock_model.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # an annotation only: importing core.plan costs every lock reader ~25 ms
    from envtool.core.plan import Plan

# custom_metadata keys envtool writes (conda-lock wants str -> str).
KEY_HASH = "envtool_input_hash"
KEY_REQUEST = "envtool_request"
HASH_LINE = re.compile(r"^\s*" + KEY_HASH + r":\s*'?([0-9a-f]{64})'?\s*$", re.MULTILINE)


@dataclass(frozen=True)
class SolvedPackage:
    """One conda record of a solution (what rattler returned, in plain types)."""

    name: str
    version: str
    build: str
    platform: str
    url: str
    subdir: str = ""
    channel: str = ""
    md5: str | None = None
    sha256: str | None = None
    depends: tuple[str, ...] = ()


@dataclass(frozen=True)
class PipPackage:
    """One pip distribution resolved by `uv pip compile` for a platform."""

    name: str
    version: str
    platform: str
    url: str
    sha256: str | None
    dependencies: tuple[str, ...] = ()


def compute_input_hash(
    environment_yml: str, options: dict[str, Any], channel_identity: list[str], version: str
) -> str:
    """sha256 over everything that can change a solve: the request file, the plan options, what the
    channels hold (local repodata size+mtime; remote channels by URL) and envtool's version."""
    payload = json.dumps(
        {
            "environment.yml": environment_yml,
            "options": options,
            "channels": channel_identity,
            "envtool": version,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def render_options(options: dict[str, Any]) -> str:
    """Compact JSON (no spaces, so YAML keeps it on one line and `parse_lock_options` finds it
    without a YAML parser)."""
    return json.dumps(options, sort_keys=True, separators=(",", ":"))


# The lock's own content digest: sha256 of the file's bytes without the line that records it.
# The input hash says the *request* is unchanged; this says the *lock* is what envtool wrote (an
# edited url/sha256 is not "fresh"). An integrity check against edits, not a signature: whoever
# edits the file can recompute it.
KEY_DIGEST = "envtool_lock_sha256"
DIGEST_PLACEHOLDER = "x" * 64  # written first, replaced by the digest of the rendered file
_DIGEST_LINE = re.compile(rb"^[ \t]*" + KEY_DIGEST.encode() + rb":[^\n]*\n?", re.MULTILINE)
_DIGEST_VALUE = re.compile(
    rb"^[ \t]*" + KEY_DIGEST.encode() + rb":[ \t]*'?([0-9a-f]{64})'?[ \t]*\r?$", re.MULTILINE
)


def lock_content_digest(lock_bytes: bytes) -> str:
    """sha256 of a conda-lock.yml without its content-digest line (the first one)."""
    return hashlib.sha256(_DIGEST_LINE.sub(b"", lock_bytes, count=1)).hexdigest()


def with_content_digest(lock_bytes: bytes) -> bytes:
    """The rendered lock with DIGEST_PLACEHOLDER replaced by its content digest (quoted: a
    digest of digits only must stay a string)."""
    digest = lock_content_digest(lock_bytes)
    return lock_bytes.replace(DIGEST_PLACEHOLDER.encode(), f"'{digest}'".encode(), 1)


def content_digest_state(lock_bytes: bytes) -> str | None:
    """None when the lock is what envtool wrote; else why not ('no digest', 'edited')."""
    m = _DIGEST_VALUE.search(lock_bytes)
    if m is None:
        return "no digest"
    return None if m.group(1).decode() == lock_content_digest(lock_bytes) else "edited"


_REQUEST_LINE = re.compile(r"^\s*" + KEY_REQUEST + r":\s*'(.*)'\s*$", re.MULTILINE)


def parse_lock_options(lock_text: str) -> dict[str, Any] | None:
    """The plan options recorded in a conda-lock.yml (None when absent or unreadable)."""
    m = _REQUEST_LINE.search(lock_text)
    if not m:
        return None
    try:
        value = json.loads(m.group(1).replace("''", "'"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_lock_stamp(lock_text: str) -> str | None:
    """The input hash recorded in a conda-lock.yml, found without a YAML parser (fast no-op path)."""
    m = HASH_LINE.search(lock_text)
    return m.group(1) if m else None


def plan_custom_metadata(
    plan: Plan,
    options: dict[str, Any],
    input_hash: str,
    envtool_version: str,
    solved_torch: str = "",
) -> dict[str, str]:
    """What envtool records about the plan inside the lock (all str, sorted by the writer).
    `envtool_cuda_arch` (the plan's `__cuda_arch`) only when the plan has one: a CPU plan or one
    made without GPUs records no GPU assumption."""
    arch = {"envtool_cuda_arch": plan.cuda_arch} if plan.cuda_arch else {}
    return {
        **arch,
        "envtool_version": envtool_version,
        "envtool_flavor": plan.flavor,
        "envtool_cuda": plan.cuda or "cpu",
        "envtool_min_driver": plan.min_driver or "",
        "envtool_gpu_archs": " ".join(_solved_archs(plan, solved_torch)),
        "envtool_torch": solved_torch or plan.torch or "",
        "envtool_platforms_cuda": " ".join(
            f"{p.platform}={p.cuda or 'cpu'}" for p in plan.platforms
        ),
        KEY_REQUEST: render_options(options),
        KEY_HASH: input_hash,
    }


def _solved_archs(plan: Plan, solved_torch: str) -> tuple[str, ...]:
    """The GPU architectures of the build the solve chose (its torch release's row); the plan's
    when the platforms solved different releases or no row knows the release."""
    from envtool.core.cuda import build_archs

    if not plan.cuda or not solved_torch or " " in solved_torch:
        return plan.archs
    return build_archs(plan.flavor, plan.cuda, solved_torch) or plan.archs


def split_dependency(spec: str) -> tuple[str, str]:
    """'python >=3.11,<3.12.0a0' -> ('python', '>=3.11,<3.12.0a0'); 'filelock' -> ('filelock', '*')."""
    name, _, rest = spec.strip().partition(" ")
    return name, rest.strip() or "*"


def dependency_map(depends: tuple[str, ...]) -> dict[str, str]:
    """conda-lock's `dependencies:` mapping; repeated names are joined with ','."""
    out: dict[str, str] = {}
    for dep in depends:
        name, spec = split_dependency(dep)
        out[name] = spec if name not in out else f"{out[name]},{spec}"
    return dict(sorted(out.items()))
