"""The codebase stays ruff clean (lint rules in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import REPO


def test_ruff_check_clean() -> None:
    ruff = shutil.which("ruff") or str(REPO / ".venv" / "bin" / "ruff")
    if not shutil.which(ruff):
        pytest.skip("ruff not installed (it is in the test extra)")
    proc = subprocess.run([ruff, "check", str(REPO)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _trees(*folders: str):
    import ast

    for folder in folders:
        for path in sorted((REPO / folder).rglob("*.py")):
            yield path.relative_to(REPO), ast.parse(path.read_text(), str(path))


def _dotted(node) -> str:
    import ast

    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def test_project_rules_hold() -> None:
    """No shell=True, YAML only through safe loaders, only the CLI exits, a pure core."""
    import ast

    bad = []
    for rel, tree in _trees("envtool", "tests", "bench"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                kw = {k.arg: k.value for k in node.keywords}
                shell = kw.get("shell")
                if isinstance(shell, ast.Constant) and shell.value is True:
                    bad.append(f"{rel}:{node.lineno}: shell=True")
                if name in ("yaml.unsafe_load", "yaml.full_load", "yaml.load_all"):
                    bad.append(f"{rel}:{node.lineno}: {name}")
                if name == "yaml.load" and "Safe" not in ast.unparse(kw.get("Loader", node)):
                    bad.append(f"{rel}:{node.lineno}: yaml.load without a safe loader")
                if name in ("sys.exit", "os._exit", "exit") and rel.parts[0] == "envtool":
                    if rel.name not in ("cli.py", "deep_script.py", "env_probe_script.py"):
                        bad.append(f"{rel}:{node.lineno}: {name} outside cli.py")
            if rel.parts[:2] == ("envtool", "core"):
                mods = []
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    mods = [node.module]
                for mod in mods:
                    if mod.split(".")[0] in ("os", "subprocess", "click", "rattler"):
                        bad.append(f"{rel}:{node.lineno}: the pure core imports {mod}")
    assert not bad, "\n".join(bad)
