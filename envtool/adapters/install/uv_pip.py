"""The pip section, resolved with `uv pip compile` for the target python and platform (the pure
parts, requirement lines and pylock.toml, are core/pip_lock.py).

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

from envtool.adapters.proc import run_capture
from envtool.adapters.solve.rattler_solve import one_line
from envtool.core.lockfile import LockedPackage, PipPackage, SolvedPackage
from envtool.core.pip_lock import parse_pylock, python_platform, requirements_text
from envtool.errors import DiagnosedFailure, UsageError

# conda package -> the pip distributions it provides (only the ones pip must never replace)
TORCH_FAMILY = {"pytorch": "torch", "torchvision": "torchvision", "torchaudio": "torchaudio"}
_PASS_OPTIONS = ("--index-url", "--extra-index-url", "--find-links")
# Every uv run: build nothing (an sdist's build backend is code that came in as data), and read
# no uv.toml / pyproject.toml [tool.uv] from the working folder: a cloned repo's file could set
# `target` and send the install outside the prefix. uv's UV_* environment variables still apply.
UV_GUARDS = ("--no-build", "--no-config")


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


def compile_pip(
    pip_lines: list[str],
    conda: list[SolvedPackage],
    platform: str,
    python: str | None = None,
    glibc: str = "2.28",
) -> list[PipPackage]:
    """Resolve environment.yml pip entries for this platform and the conda solution's python."""
    from envtool.core.spec import normalize_pip_name, parse_pip_line, pip_lock_problem

    conda_names = {p.name for p in conda}
    guarded = {TORCH_FAMILY[n] for n in conda_names if n in TORCH_FAMILY}
    py = python or _conda_python(conda)
    requirements: list[str] = []
    options: list[str] = []
    for text in pip_lines:
        line = parse_pip_line(text)
        refused = pip_lock_problem(line)
        if refused:
            raise UsageError(
                f"environment.yml pip entry {text.strip()[:120]!r}: {refused[0]}", refused[1]
            )
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
            *UV_GUARDS,
            *options,
        ]
        from envtool.adapters.config import offline_mode

        if offline_mode() and "--offline" not in argv:  # uv's cache only, as rattler's for conda
            argv.append("--offline")
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


def _conda_python(conda: list[SolvedPackage]) -> str:
    for p in conda:
        if p.name == "python":
            return ".".join(p.version.split(".")[:2])
    raise UsageError(
        "the environment has a pip section but no python", "add python to the dependencies"
    )


def install_pip(
    pkgs: list[LockedPackage], urls: dict[str, str], prefix: Path, uv_cache: Path
) -> None:
    from envtool.adapters.install import install_state
    from envtool.adapters.locate import python_in
    from envtool.adapters.proc import run_capture
    from envtool.core.pip_lock import pip_requirements

    python = python_in(prefix)
    if not python.exists():
        raise DiagnosedFailure(
            f"the lock has pip packages but {prefix} has no python",
            "add python to the environment's conda dependencies and re-lock",
        )
    req = install_state.envtool_meta_dir(prefix) / "pip-requirements.txt"
    from envtool.adapters.files import write_atomic

    write_atomic(req, pip_requirements(pkgs, urls, "the lock"))  # the one checked writer
    offline = all(urls[p.file_name].startswith("file://") for p in pkgs)
    argv = [
        uv_binary(),
        "pip",
        "install",
        "--python",
        str(python),
        "--no-deps",
        "--require-hashes",
        "--link-mode",
        "copy",
        "--cache-dir",
        str(uv_cache),
        *UV_GUARDS,
        "-r",
        str(req),
    ]
    if offline:
        argv.insert(3, "--offline")
    proc = run_capture(argv, timeout=1800)
    if not proc.ok:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise DiagnosedFailure(
            f"pip part of the install failed: {' | '.join(tail)}",
            "the environment is marked incomplete; fix the cause and run the install again",
        )
