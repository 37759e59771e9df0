"""The pip section, resolved with `uv pip compile` for the target python and platform.

Output is read from uv's pylock.toml (PEP 751: every distribution with its URL and sha256), and
becomes `manager: pip` entries of conda-lock.yml. A pip entry that would replace the conda torch
(directly, or because its resolution pulls torch) is refused: pip would install a PyPI wheel over
the CUDA build the plan chose.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from envtool.adapters.proc import run_capture
from envtool.adapters.solve.rattler_solve import one_line
from envtool.core.lockfile import PipPackage, SolvedPackage
from envtool.core.shell_quote import printable
from envtool.core.spec import PIP_NAME
from envtool.errors import UsageError

if TYPE_CHECKING:
    from envtool.core.lockfile import LockedPackage

# conda package -> the pip distributions it provides (only the ones pip must never replace)
TORCH_FAMILY = {"pytorch": "torch", "torchvision": "torchvision", "torchaudio": "torchaudio"}
PYTHON_PLATFORM = {
    "linux-64": "x86_64-manylinux_{glibc}",
    "linux-aarch64": "aarch64-manylinux_{glibc}",
    "osx-arm64": "aarch64-apple-darwin",
    "win-64": "x86_64-pc-windows-msvc",
}
_PASS_OPTIONS = ("--index-url", "--extra-index-url", "--find-links")
# one token: no whitespace (a requirements file splits options there), no control characters
# (a newline starts another requirement)
_TOKEN = re.compile(r"[^\s\x00-\x1f\x7f-\x9f]+")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def check_pip_name(name: object, where: str) -> str:
    """A PEP 508 distribution name, or a one-line UsageError naming `where`."""
    if not isinstance(name, str) or not PIP_NAME.fullmatch(name):
        raise UsageError(
            f"{where}: pip package name {printable(repr(name))[:120]} is not a valid name",
            "a pip name is letters, digits and . _ - (PEP 508); fix or re-create the lock",
        )
    return name


def locked_requirement(name: str, version: str, url: str, sha256: str | None, where: str) -> str:
    """One line `NAME @ URL --hash=sha256:HEX` from a lock's pip entry, each field checked:
    a newline or space in any of them would add requirements or options to the file."""
    check_pip_name(name, where)
    for field_name, value in (("version", version), ("url", url)):
        if not isinstance(value, str) or not _TOKEN.fullmatch(value):
            raise UsageError(
                f"{where}: pip package {name}: {field_name} {printable(repr(value))[:120]} "
                "holds spaces or control characters",
                "fix or re-create the lock",
            )
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise UsageError(
            f"{where}: pip package {name}: sha256 {printable(repr(sha256))[:120]} is not 64 hex "
            "digits",
            "re-lock so every pip entry carries a hash",
        )
    return f"{name} @ {url} --hash=sha256:{sha256.lower()}"


def requirements_text(lines: list[str], where: str) -> str:
    """The one writer of requirements files: each item must be one line (no newline or other
    control character), so N entries are N requirements; anything else is refused."""
    for line in lines:
        if "${" in line:  # uv/pip expand ${VAR} here: a file from elsewhere could read secrets
            raise UsageError(
                f"{where}: pip entry {printable(repr(line))[:120]} refers to an environment "
                "variable (${…})",
                "write the URL or version out in full",
            )
        if not line.strip() or _CONTROL.search(line):
            raise UsageError(
                f"{where}: pip entry {printable(repr(line))[:120]} is not a single requirement "
                "line",
                "write one requirement per entry, without newlines or control characters",
            )
    return "".join(line + "\n" for line in lines)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def uv_binary() -> str:
    """The `uv` of the `uv` PyPI package (a dependency of envtool), else the one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise UsageError("uv not found", "install it: pip install uv") from None
        return found


def python_platform(platform: str, glibc: str = "2.28") -> str:
    return PYTHON_PLATFORM[platform].format(glibc=glibc.replace(".", "_"))


def compile_pip(
    pip_lines: list[str],
    conda: list[SolvedPackage],
    platform: str,
    python: str | None = None,
    glibc: str = "2.28",
) -> list[PipPackage]:
    """Resolve environment.yml pip entries for this platform and the conda solution's python."""
    from envtool.core.spec import normalize_pip_name, parse_pip_line

    conda_names = {p.name for p in conda}
    guarded = {TORCH_FAMILY[n] for n in conda_names if n in TORCH_FAMILY}
    py = python or _conda_python(conda)
    requirements: list[str] = []
    options: list[str] = []
    for text in pip_lines:
        line = parse_pip_line(text)
        if line.kind == "option" and line.option in _PASS_OPTIONS and line.value:
            options += [line.option, line.value]
        elif line.kind == "option" or text.strip() in ("--no-index", "--offline"):
            options.append(text.strip())
        else:
            if line.name and normalize_pip_name(line.name) in guarded:
                raise UsageError(
                    f"pip entry {text.strip()!r} would replace the conda {line.name} build",
                    f"remove it from the pip section: conda already installs {line.name} for the "
                    "planned CUDA",
                )
            requirements.append(text.strip())
    if not requirements:
        return []
    with tempfile.TemporaryDirectory(prefix="envtool-uv-") as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text(requirements_text(requirements, "environment.yml pip section"))
        out = Path(tmp) / "pylock.toml"
        argv = [
            uv_binary(),
            "pip",
            "compile",
            str(req),
            "--format",
            "pylock.toml",
            "-o",
            str(out),
            "--python-version",
            py,
            "--python-platform",
            python_platform(platform, glibc),
            "--generate-hashes",
            "--no-header",
            "--quiet",
            *options,
        ]
        res = run_capture(argv, timeout=600)
        if not res.ok:
            err = res.stderr.strip() or res.stdout.strip()
            pulled = [g for g in sorted(guarded) if re.search(rf"\b{g}\b", err)]
            if pulled:
                raise UsageError(
                    f"the pip section pulls {', '.join(pulled)}, which would replace the conda "
                    f"build ({one_line(err, 300)})",
                    "drop the pip package that depends on torch, or install it with --no-deps later",
                )
            raise UsageError(
                f"uv pip compile failed for {platform}: {one_line(err, 300)}",
                "fix the pip section of environment.yml (names, pins, --index-url/--find-links)",
            )
        packages = parse_pylock(out.read_text(), platform)
    pulled = sorted({p.name for p in packages} & guarded)
    if pulled:
        raise UsageError(
            f"the pip section pulls {', '.join(pulled)} from PyPI, which would replace the conda "
            "CUDA build",
            "drop the pip package that depends on torch, or add it to conda dependencies instead",
        )
    # conda already provides these; keep conda's copy and lock only what pip adds
    return [p for p in packages if p.name not in conda_names]


def parse_pylock(text: str, platform: str) -> list[PipPackage]:
    """uv's pylock.toml -> PipPackage per distribution (the wheel for this platform, else sdist)."""
    import tomllib

    data = tomllib.loads(text)
    out: list[PipPackage] = []
    for pkg in data.get("packages", []):
        wheels = pkg.get("wheels") or []
        pick = _pick_wheel(wheels, platform) or pkg.get("sdist")
        if not pick:
            raise UsageError(
                f"pip package {pkg.get('name')}: no wheel or sdist URL in the resolution",
                "use an index or --find-links folder that serves files",
            )
        out.append(
            PipPackage(
                name=pkg["name"],
                version=str(pkg.get("version", "")),
                platform=platform,
                url=pick["url"],
                sha256=(pick.get("hashes") or {}).get("sha256"),
            )
        )
    return sorted(out, key=lambda p: p.name)


def _pick_wheel(wheels: list[dict], platform: str) -> dict | None:
    if len(wheels) <= 1:
        return wheels[0] if wheels else None
    want = {
        "linux-64": ("manylinux", "x86_64"),
        "linux-aarch64": ("manylinux", "aarch64"),
        "osx-arm64": ("macosx", "arm64"),
        "win-64": ("win", "amd64"),
    }[platform]
    for w in wheels:
        name = w["url"].rsplit("/", 1)[-1].lower()
        if all(part in name for part in want):
            return w
    return next((w for w in wheels if w["url"].endswith("-none-any.whl")), wheels[0])


def _conda_python(conda: list[SolvedPackage]) -> str:
    for p in conda:
        if p.name == "python":
            return ".".join(p.version.split(".")[:2])
    raise UsageError(
        "the environment has a pip section but no python", "add python to the dependencies"
    )


def pip_requirements(pkgs: list[LockedPackage], urls: dict[str, str], where: str) -> str:
    """The requirements file for a lock's pip entries (`uv pip install --require-hashes
    --no-deps -r`): one checked line per entry, so the file installs exactly these."""
    lines = [
        locked_requirement(p.name, p.version, urls[p.file_name].split("#", 1)[0], p.sha256, where)
        for p in pkgs
    ]
    return requirements_text(lines, where)
