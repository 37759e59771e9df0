"""The documentation site: it builds with `mkdocs build --strict` (every page placed in the nav or
deliberately left out of it, no broken link, README's sections found), the command reference it
publishes is the CLI's own (generated at build time by docs/hooks/cli_reference.py), and README
stays a newcomer's page (≤ 12 KB)."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from conftest import REPO
from readme_commands import README_TEXT, extract, parse_error

from envtool.cli import _click_cli

README_LIMIT = 12 * 1024


def _hook():
    spec = importlib.util.spec_from_file_location(
        "cli_reference", REPO / "docs/hooks/cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_a_newcomers_page() -> None:
    size = len(README_TEXT.encode("utf-8"))
    assert size <= README_LIMIT, f"README.md is {size} bytes; move reference text into docs/"
    headings = re.findall(r"^## (.+)$", README_TEXT, re.MULTILINE)
    assert headings[0] == "Install" and headings[-1] == "Develop and test", headings
    assert any(h.startswith("Ten minutes") for h in headings), headings


def test_readmes_links_lead_to_pages_that_exist() -> None:
    """README is read on GitHub, outside mkdocs' link checks: its relative links are checked here."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README_TEXT)
    relative = [link for link in links if "://" not in link]
    assert len(relative) >= 10, relative
    missing = [link for link in relative if not (REPO / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


# names in the code that are not variables a user meets: the env probe's output marker
NOT_VARIABLES = {"ENVTOOL_PROBE_JSON"}


def test_every_envtool_variable_in_the_code_is_documented() -> None:
    """The environment-variables page lists every ENVTOOL_* name the code reads or sets."""
    page = (REPO / "docs" / "reference" / "environment-variables.md").read_text()
    names = {
        name
        for path in (REPO / "envtool").rglob("*.py")
        for name in re.findall(r"\bENVTOOL_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text())
    }
    assert len(names) >= 10, names
    undocumented = sorted(n for n in names - NOT_VARIABLES if f"`{n}" not in page)
    assert not undocumented, (
        f"document these in docs/reference/environment-variables.md: {undocumented}"
    )


def _commands_and_options() -> dict[str, set[str]]:
    """Every visible command with every visible option, as `envtool CMD --help` lists them."""
    group = _click_cli()
    root = click.Context(group, info_name="envtool")
    found: dict[str, set[str]] = {}
    for name in group.list_commands(root):
        command = group.get_command(root, name)
        assert command is not None
        found[name] = {
            opt
            for param in command.params
            if isinstance(param, click.Option) and not param.hidden
            for opt in (*param.opts, *param.secondary_opts)
        }
    return found


def test_the_reference_names_every_command_and_option() -> None:
    """What the hook writes, checked against the click objects themselves: a new option shows up
    on the page with no edit (the hook reads it), a hidden one does not."""
    text = _hook().render_reference()
    sections = dict(
        (m.group(1), m.group(2))
        for m in re.finditer(r"^### envtool (\S+)\n(.*?)(?=^##|\Z)", text, re.MULTILINE | re.DOTALL)
    )
    expected = _commands_and_options()
    assert set(sections) == set(expected)
    # in `envtool --help`'s workflow order: create first, under its section's heading
    assert re.search(r"^## Environments\n+### envtool create\n", text, re.MULTILINE)
    for name, options in expected.items():
        for option in options:
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", sections[name]), (
                name,
                option,
            )
    assert "--virtual-package" not in sections["create"]  # hidden stays hidden
    assert "Usage: " not in text and "envtool create [OPTIONS] " in sections["create"]


def test_the_examples_in_the_commands_help_parse() -> None:
    """The reference shows each command's own examples (its docstring): they parse as the docs'
    commands do (the help text is published, so it must not rot either)."""
    commands, _ = extract(_hook().render_reference(), "reference (generated)")
    assert len(commands) >= 4, [c.text for c in commands]
    for command in commands:
        assert parse_error(command) is None, command.text


def test_help_text_with_angle_brackets_is_text_not_html() -> None:
    """`<envs dir>/NAME` in a help string must reach the page escaped, not as an HTML tag."""
    hook = _hook()
    assert hook._cell("instead of <envs dir>/NAME | x") == "instead of &lt;envs dir&gt;/NAME \\| x"


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for item in node.values() for page in _nav_pages(item)]
    return []


def test_every_docs_page_is_in_the_nav_or_left_out_on_purpose() -> None:
    """What --strict enforces through mkdocs' validation, checked without mkdocs installed (a
    helper with only the test extra adds a page: this fails at once, not after the merge)."""
    import yaml

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["strict"] is True
    assert config["validation"]["nav"]["omitted_files"] == "warn"  # warn + strict = failure
    nav = _nav_pages(config["nav"])
    left_out = [line.strip() for key in ("not_in_nav", "exclude_docs") for line in
                config.get(key, "").splitlines() if line.strip()]  # fmt: skip
    assert all(p.endswith("/") for p in left_out), left_out  # folders only: nothing hides a page
    docs = REPO / "docs"
    pages = sorted(str(p.relative_to(docs)) for p in docs.rglob("*.md"))
    missing = [p for p in nav if not (docs / p).is_file()]
    assert not missing, f"mkdocs.yml's nav names pages that do not exist: {missing}"
    placed = set(nav)
    unplaced = [p for p in pages if p not in placed and not p.startswith(tuple(left_out))]
    assert not unplaced, f"add these pages to mkdocs.yml's nav (or not_in_nav): {unplaced}"
    assert len(nav) == len(placed), "a page is in the nav twice"


@pytest.mark.slow
@pytest.mark.integration
def test_the_site_builds_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs-material is not installed: pip install -e '.[docs]' (CI installs it)")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    page = (site / "reference" / "commands" / "index.html").read_text()
    reference = html.unescape(page)
    for name, options in _commands_and_options().items():
        assert f"envtool {name}" in reference
        assert all(option in reference for option in options), name
    assert "instead of &lt;envs dir&gt;/NAME" in page  # text on the page, not a swallowed tag
    # README's walkthrough is the getting-started page's, by inclusion (one text, no copy)
    started = _text(site / "getting-started" / "index.html")
    assert "envtool create hello --cuda cpu --profile lm" in started  # the walkthrough section
    assert "uv tool install ." in started  # the install section
    assert "--8&lt;--" not in started and "--8<--" not in started
    assert not (site / "hooks").exists()  # the build hook is not published


def _text(page: Path) -> str:
    """A built page as text: tags dropped (code is highlighted token by token), entities read."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))
