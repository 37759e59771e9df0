"""The templates share code on purpose (LR schedule, RNG state, checkpoint helpers, signal and
loader-worker handling, the GPT model and its datasets), yet each stays one self-contained file
that `envtool init` copies. Each shared block sits between `# --- shared: NAME ---` and
`# --- end shared ---`; these tests fail as soon as one copy changes alone, and when a template
loses (or gains) a block it is meant to carry."""

from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path

import pytest
from conftest import REPO

TEMPLATES_DIR = REPO / "templates"
# Which template carries which block. Any other templates/*.py that marks a block (e.g. a new
# template copying the GPT model) is compared too: see test_every_marked_copy_is_identical.
EXPECTED = {
    "lr_schedule": {"ddp", "lm", "fsdp"},
    "rng_state": {"ddp", "lm", "fsdp"},
    "checkpoint_file": {"ddp", "lm"},  # fsdp checkpoints through DCP: its own code
    "resume_check": {"ddp", "lm", "fsdp"},
    "stop_signal": {"ddp", "lm", "fsdp"},
    "loader_workers": {"ddp", "lm", "fsdp"},
    "token_data": {"lm", "fsdp"},
    "gpt_model": {"lm", "fsdp"},
}
OPEN = re.compile(r"^# --- shared: (\S+) ---$")
CLOSE = "# --- end shared ---"


def shared_blocks(text: str, where: str = "template") -> dict[str, str]:
    """NAME -> the exact text between its markers. Unbalanced, nested or repeated markers are
    errors: a block must never silently swallow (or lose) code."""
    blocks: dict[str, str] = {}
    name, body = None, []
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        opened = OPEN.match(line.rstrip("\n"))
        if opened:
            if name is not None:
                raise ValueError(f"{where}:{number}: block {opened[1]!r} opens inside {name!r}")
            if opened[1] in blocks:
                raise ValueError(f"{where}:{number}: block {opened[1]!r} marked twice")
            name, body = opened[1], []
        elif line.rstrip("\n") == CLOSE:
            if name is None:
                raise ValueError(f"{where}:{number}: '{CLOSE}' without an opening marker")
            blocks[name], name = "".join(body), None
        elif name is not None:
            body.append(line)
    if name is not None:
        raise ValueError(f"{where}: block {name!r} is never closed")
    return blocks


def marked_templates() -> dict[str, dict[str, str]]:
    return {
        path.stem: shared_blocks(path.read_text(encoding="utf-8"), path.name)
        for path in sorted(TEMPLATES_DIR.glob("*.py"))
    }


def differing_copies(copies: dict[str, str]) -> str:
    """'' when every copy is identical, else a unified diff of each odd copy against the first."""
    (first, reference), *others = sorted(copies.items())
    out = []
    for name, text in others:
        if text != reference:
            out += difflib.unified_diff(
                reference.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"templates/{first}.py",
                f"templates/{name}.py",
            )
    return "".join(out)


def test_each_template_carries_exactly_its_shared_blocks() -> None:
    found = marked_templates()
    for template in ("ddp", "lm", "fsdp"):
        expected = {block for block, owners in EXPECTED.items() if template in owners}
        assert set(found[template]) == expected, f"templates/{template}.py"


@pytest.mark.parametrize("block", sorted(EXPECTED))
def test_every_marked_copy_is_identical(block: str) -> None:
    copies = {name: blocks[block] for name, blocks in marked_templates().items() if block in blocks}
    assert EXPECTED[block] <= set(copies)
    diff = differing_copies(copies)
    assert not diff, f"'{block}' changed in one template only; apply it to all:\n{diff}"


def test_blocks_are_whole_top_level_definitions() -> None:
    """A marker pair around half a function would compare the wrong thing: each block parses
    on its own and defines what the template uses."""
    for name, blocks in marked_templates().items():
        for block, text in blocks.items():
            tree = ast.parse(text, f"{name}.py:{block}")
            defined = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
            assert defined, f"templates/{name}.py: '{block}' defines nothing"


def test_a_copy_changed_alone_is_caught(tmp_path: Path) -> None:
    """The check itself: edit one line of lm's GPT model (fsdp's copy unchanged) -> a diff naming
    both files; and a marker deleted by an edit is an error, not a smaller block."""
    lm = (TEMPLATES_DIR / "lm.py").read_text(encoding="utf-8")
    fsdp = (TEMPLATES_DIR / "fsdp.py").read_text(encoding="utf-8")
    edited = lm.replace("nn.init.normal_(module.weight, mean=0.0, std=0.02)", "pass", 1)
    assert edited != lm
    copies = {"lm": shared_blocks(edited)["gpt_model"], "fsdp": shared_blocks(fsdp)["gpt_model"]}
    diff = differing_copies(copies)
    assert "templates/fsdp.py" in diff and "templates/lm.py" in diff and "+            pass" in diff
    assert not differing_copies({"lm": shared_blocks(lm)["gpt_model"], "fsdp": copies["fsdp"]})

    unclosed = lm.replace(f"\n{CLOSE}\n", "\n# end\n", 1)
    with pytest.raises(ValueError, match="opens inside|never closed"):
        shared_blocks(unclosed)


def test_generate_template_shares_only_identical_blocks() -> None:
    """templates/generate.py (a decode-time model with a KV cache) is not lm's GPT: it carries no
    gpt_model marker unless its copy is the same code, which the test above then enforces."""
    path = TEMPLATES_DIR / "generate.py"
    if not path.is_file():
        pytest.skip("no templates/generate.py")
    blocks = shared_blocks(path.read_text(encoding="utf-8"), path.name)
    lm = shared_blocks((TEMPLATES_DIR / "lm.py").read_text(encoding="utf-8"))
    for block, text in blocks.items():
        assert text == lm.get(block, text), f"generate.py's '{block}' differs from lm.py's"
