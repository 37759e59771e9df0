"""The codebase stays ruff clean (lint rules in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import REPO


def test_ruff_check_clean() -> None:
    ruff = shutil.which("ruff") or str(REPO / ".venv" / "bin" / "ruff")
    if not shutil.which(ruff):
        pytest.skip("ruff not installed (it is in the test extra)")
    proc = subprocess.run([ruff, "check", str(REPO)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_help_imports_no_heavy_modules() -> None:
    """`envtool --help` must stay fast: no rattler, conda-lock or yaml on that path."""
    code = (
        "import sys\n"
        "from envtool.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('rattler', 'conda_lock', 'yaml', 'pynvml') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout, out.stdout
