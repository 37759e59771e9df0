"""The codebase stays ruff clean (lint rules and layout: pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import REPO


@pytest.mark.integration
def test_ruff_check_clean() -> None:
    ruff = shutil.which("ruff") or str(REPO / ".venv" / "bin" / "ruff")
    if not shutil.which(ruff):
        pytest.skip("ruff not installed (it is in the test extra)")
    proc = subprocess.run([ruff, "check", str(REPO)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # one layout too (`ruff format`; `# fmt: skip` where a call reads better on one line)
    python = [str(REPO / d) for d in ("envtool", "tests", "bench", "docs", "templates")]
    proc = subprocess.run(
        [ruff, "format", "--check", "--exclude", "*.md", *python], capture_output=True, text=True
    )
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


def _safe_loader(expr: str) -> bool:
    """safe_load's `strict_loader()` is a SafeLoader subclass: checked, not taken by its name."""
    import yaml

    if expr != "strict_loader()":
        return False
    from envtool.core.safe_load import strict_loader

    safe = tuple(c for c in (yaml.SafeLoader, getattr(yaml, "CSafeLoader", None)) if c)
    return issubclass(strict_loader(), safe)


@pytest.mark.slow
def test_project_rules_hold() -> None:
    """No shell=True, YAML only through safe loaders, only the CLI exits, a core without os,
    subprocess, click or rattler (the layers: test_layers_import_one_way)."""
    import ast

    bad: list[str] = []
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
                if name == "yaml.load":
                    loader = ast.unparse(kw.get("Loader", node))
                    if "Safe" not in loader and not _safe_loader(loader):
                        bad.append(f"{rel}:{node.lineno}: yaml.load without a safe loader")
                if name in ("sys.exit", "os._exit", "exit") and rel.parts[0] == "envtool":
                    if rel.name not in (
                        "cli.py",
                        "deep_script.py",
                        "env_probe_script.py",
                        "preflight_script.py",
                    ):
                        bad.append(f"{rel}:{node.lineno}: {name} outside cli.py")
            if rel.parts[:2] == ("envtool", "core"):
                mods = []
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    mods = [node.module]
                for mod in mods:
                    if mod == "rattler" and _pure_rattler(node):
                        continue  # rattler's parsers: docs/architecture.md, "rattler in the core"
                    if mod.split(".")[0] in ("os", "subprocess", "click", "rattler"):
                        bad.append(f"{rel}:{node.lineno}: the pure core imports {mod}")
    assert not bad, "\n".join(bad)


# what the core may take from rattler: its parsers, which read text and do no I/O
PURE_RATTLER = {"MatchSpec", "Version"}


def _pure_rattler(node) -> bool:
    """`from rattler import MatchSpec, Version` (nothing else: no solve, no client, no index)."""
    import ast

    return isinstance(node, ast.ImportFrom) and all(a.name in PURE_RATTLER for a in node.names)


# Layer imports that break the rule, each with why it stays (module -> imported module). Empty:
# a new entry needs a reason a reviewer accepts (and says where the code should move).
LAYER_ALLOWLIST: dict[tuple[str, str], str] = {}


def _envtool_imports(tree):
    """(line, module) for every `import envtool.X` / `from envtool.X import Y` (Y a module too)."""
    import ast

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.startswith("envtool"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "envtool" or node.module.startswith("envtool."):
                yield node.lineno, node.module
                # `from envtool.commands import create`: the module create (not a name in
                # the package's __init__, like project_dir_option)
                folder = REPO.joinpath(*node.module.split("."))
                yield from (
                    (node.lineno, f"{node.module}.{a.name}")
                    for a in node.names
                    if (folder / f"{a.name}.py").is_file() or (folder / a.name).is_dir()
                )


def _module(rel) -> str:
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer_break(me: str, mod: str) -> str | None:
    """Why `me` importing `mod` breaks the layers: commands -> workflows -> adapters -> core,
    one way."""
    under = lambda m, pkg: m == pkg or m.startswith(pkg + ".")  # noqa: E731
    if under(me, "envtool.core"):
        for pkg in ("envtool.adapters", "envtool.commands", "envtool.workflows", "envtool.cli"):
            if under(mod, pkg):
                return f"the pure core imports {pkg}"
    if under(me, "envtool.adapters"):
        for pkg, what in (("envtool.commands", "a command"), ("envtool.workflows", "a workflow")):
            if under(mod, pkg):
                return f"an adapter imports {what}"
    if under(me, "envtool.workflows"):
        if under(mod, "envtool.commands") or under(mod, "envtool.cli"):
            return "a workflow imports a command"
    if under(me, "envtool.commands") and under(mod, "envtool.commands"):
        if mod not in ("envtool.commands", me) and not under(me, mod):
            return "a command imports another command"
    return None


def _layer_violations() -> list[str]:
    """core never imports adapters/commands/workflows/cli; adapters never import commands or
    workflows; workflows never import commands; commands never import each other (shared code lives in an adapter, the core, or the
    commands package's __init__)."""
    bad, allowed = [], set()
    for rel, tree in _trees("envtool"):
        me = _module(rel)
        for line, mod in _envtool_imports(tree):
            why = _layer_break(me, mod)
            if why is None:
                continue
            if (me, mod) in LAYER_ALLOWLIST:
                allowed.add((me, mod))
                continue
            bad.append(f"{rel}:{line}: {why} ({mod})")
    stale = set(LAYER_ALLOWLIST) - allowed
    bad += [
        f"LAYER_ALLOWLIST: {me} -> {mod} no longer imports it: remove the entry"
        for me, mod in sorted(stale)
    ]
    return bad


def test_layers_import_one_way() -> None:
    """commands -> workflows -> adapters -> core, never back: the core imports no adapter,
    command, workflow or cli; an adapter no command or workflow; a workflow no command; a
    command no other command (shared code lives in a workflow, an adapter, the core, or the
    commands package's __init__)."""
    bad = _layer_violations()
    assert not bad, "\n".join(bad)


def _import_graph() -> dict[str, set[str]]:
    """envtool's modules -> the envtool modules each imports, wherever in the file (an import
    inside a function is an edge too: it is a cycle waiting for the first call)."""
    graph: dict[str, set[str]] = {}
    for rel, tree in _trees("envtool"):
        me = _module(rel)
        graph.setdefault(me, set()).update(m for _, m in _envtool_imports(tree) if m != me)
    return {me: {m for m in mods if m in graph} for me, mods in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    """No two envtool modules import each other, directly or round a longer loop (an
    installer that imports installed, which imports installer): one of them holds what both
    need, or it moves down a layer."""
    graph = _import_graph()
    cycles = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c)
        for c in _cycles(graph)
    ]
    assert not cycles, "\n".join(cycles)
