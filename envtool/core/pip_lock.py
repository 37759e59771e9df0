"""The pip section of a lock, pure: the one structured writer of requirements files (each lock
entry one checked `NAME @ URL --hash=sha256:HEX` line: a newline or a `${VAR}` in any field is
refused), uv's pylock.toml read into PipPackage entries (the wheel for the platform: an sdist is
refused, building it runs its code), and uv's --python-platform per conda platform. Running uv is adapters/install/uv_pip.py.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from envtool.core.lockfile import PipPackage, file_name_of
from envtool.core.shell_quote import printable
from envtool.core.spec import PIP_NAME
from envtool.errors import UsageError

if TYPE_CHECKING:
    from envtool.core.lockfile import LockedPackage

PYTHON_PLATFORM = {
    "linux-64": "x86_64-manylinux_{glibc}",
    "linux-aarch64": "aarch64-manylinux_{glibc}",
    "osx-arm64": "aarch64-apple-darwin",
    "osx-64": "x86_64-apple-darwin",
    "win-64": "x86_64-pc-windows-msvc",
}


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
    # conda-lock may lock an sdist (a package without wheels); installing one runs its build
    # backend, code that came in with the lock. Read, exported: yes. Installed: wheels only.
    if not file_name_of(url).endswith(".whl"):
        raise UsageError(
            f"{where}: pip package {name}: {printable(file_name_of(url))[:120]} is a source "
            "distribution; installing it runs its build code, and envtool installs wheels only",
            f"re-lock with a version of {name} that has a wheel, or build the wheel yourself and "
            "lock that",
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


def python_platform(platform: str, glibc: str = "2.28") -> str:
    return PYTHON_PLATFORM[platform].format(glibc=glibc.replace(".", "_"))


def parse_pylock(text: str, platform: str) -> list[PipPackage]:
    """uv's pylock.toml -> PipPackage per distribution (the wheel for this platform; a package
    with only an sdist is refused: installing it would run its build code)."""
    import tomllib

    data = tomllib.loads(text)
    out: list[PipPackage] = []
    for pkg in data.get("packages", []):
        wheels = pkg.get("wheels") or []
        pick = _pick_wheel(wheels, platform)
        if not pick:
            only = " (only a source distribution)" if pkg.get("sdist") else ""
            raise UsageError(
                f"pip package {printable(str(pkg.get('name')))}: no wheel for {platform} in the "
                f"resolution{only}; envtool locks wheels only (building runs the package's code)",
                "pin a version that has a wheel for this platform, or use an index or "
                "--find-links folder that serves one",
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
        "osx-64": ("macosx", "x86_64"),
        "win-64": ("win", "amd64"),
    }[platform]
    for w in wheels:
        name = w["url"].rsplit("/", 1)[-1].lower()
        if all(part in name for part in want):
            return w
    return next((w for w in wheels if w["url"].endswith("-none-any.whl")), wheels[0])


def pip_requirements(pkgs: list[LockedPackage], urls: dict[str, str], where: str) -> str:
    """The requirements file for a lock's pip entries (`uv pip install --require-hashes
    --no-deps -r`): one checked line per entry, so the file installs exactly these."""
    lines = [
        locked_requirement(p.name, p.version, urls[p.file_name].split("#", 1)[0], p.sha256, where)
        for p in pkgs
    ]
    return requirements_text(lines, where)
