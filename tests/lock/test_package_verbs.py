"""`envtool add`, `drop`, `update`: environment.yml edited minimally, every lock re-solved for real
(rattler over a channel channel_builder builds), the lock diff printed and in --json, the env
installed from that channel; a failed re-lock leaves environment.yml and the locks as they were."""

from __future__ import annotations

import json
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool

from envtool.core.env_edit import edit_dependencies
from envtool.core.spec import parse_conda_spec

pytestmark = pytest.mark.integration

TOOL = "tinytool"


def _tool(version: str) -> cb.Pkg:
    return cb.Pkg(
        TOOL,
        version,
        "h0_0",
        subdir="noarch",
        files={f"share/{TOOL}/VERSION": f"{version}\n"},
    )


@pytest.fixture
def project(tmp_path: Path, env: dict[str, str]) -> tuple[Path, Path, dict[str, str]]:
    """A project whose env `e1` is locked (not installed) over a fresh channel with tinytool 1.0."""
    channel = cb.build_channel(tmp_path / "channel", [*cb.cuda_graph(), _tool("1.0")])
    root = tmp_path / "project"
    root.mkdir()
    (root / "environment.yml").write_text(
        f"name: e1\nchannels:\n  - {channel.as_uri()}\ndependencies:\n  - python\n  - pytorch 2.7.*\n"
    )
    out = run_envtool(
        "create", "e1", "-f", "environment.yml", "--channel", str(channel),
        "--cuda", "12.6", "--driver", "570.86.10", "--no-install",
        env=env, cwd=root,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    yml = root / "environments" / "e1" / "environment.yml"
    # a user's comment and a blank line: add and drop keep them
    yml.write_text("# pinned for the cluster\n" + yml.read_text() + "\n")
    return root, channel, env


def _lock_names(root: Path) -> set[str]:
    from envtool.adapters.lockfile.lock_io import read_lock

    return {p.name for p in read_lock(root / "environments" / "e1" / "conda-lock.yml").packages}


def test_add_edits_relocks_diffs_and_installs(project) -> None:
    root, _, env = project
    yml = root / "environments" / "e1" / "environment.yml"
    before = yml.read_text()
    out = run_envtool("add", "e1", f"{TOOL}>=1", "--json", env=env, cwd=root)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["edit"]["added"] == [f"{TOOL}>=1"]
    added = [c for c in data["lock_diff"]["changes"] if c["kind"] == "added"]
    assert [(c["name"], c["new"]["version"]) for c in added] == [(TOOL, "1.0")]
    after = yml.read_text()
    assert after.startswith("# pinned for the cluster\n")
    # one line more, after the last conda dependency; every other byte as it was
    assert after.replace(f"  - {TOOL}>=1\n", "", 1) == before
    lines = after.splitlines()
    at = lines.index(f"  - {TOOL}>=1")
    assert lines[at - 1].startswith("  - ") and not lines[at + 1].startswith("  - ")
    assert TOOL in _lock_names(root)
    prefix = Path(env["ENVTOOL_ENVS_DIR"]) / "e1"
    assert (prefix / "share" / TOOL / "VERSION").read_text() == "1.0\n"

    # the same edit again: the spec's line is replaced in place, the lock diff is empty
    again = run_envtool("add", "e1", f"{TOOL}>=1", "--no-install", env=env, cwd=root)
    assert again.returncode == 0, again.stderr
    assert "lock diff: no package changed" in again.stdout
    assert yml.read_text() == after


def test_a_failed_relock_leaves_environment_yml_and_the_lock_as_they_were(project) -> None:
    root, _, env = project
    env_dir = root / "environments" / "e1"
    yml, lock = (
        (env_dir / "environment.yml").read_bytes(),
        (env_dir / "conda-lock.yml").read_bytes(),
    )
    out = run_envtool("add", "e1", "no-such-package", "--no-install", env=env, cwd=root)
    assert out.returncode == 2, out.stderr
    assert "no-such-package" in out.stderr and "Traceback" not in out.stderr
    assert (env_dir / "environment.yml").read_bytes() == yml
    assert (env_dir / "conda-lock.yml").read_bytes() == lock
    bad = run_envtool("add", "e1", "numpy=>>2", env=env, cwd=root)
    assert bad.returncode == 2 and "not a valid conda spec" in bad.stderr
    # arguments that would be YAML structure, a path, a screenful, a terminal escape: one
    # short line each, and environment.yml untouched
    for hostile in ("numpy\n  - evil", "numpy: {a: 1}", "../x", "a" * 5000, "\x1b[31mnumpy"):
        out = run_envtool("add", "e1", hostile, "--no-install", env=env, cwd=root)
        assert out.returncode == 2, (hostile, out.stderr)
        line = out.stderr.strip()
        assert "\n" not in line and "\x1b" not in line and len(line) < 400, line
    assert (env_dir / "environment.yml").read_bytes() == yml


def test_update_moves_to_the_newest_build_and_drop_takes_it_out(project) -> None:
    root, channel, env = project
    assert run_envtool("add", "e1", TOOL, "--no-install", env=env, cwd=root).returncode == 0
    cb.build_channel(channel, [_tool("1.1")])  # a newer release lands on the channel
    lock = root / "environments" / "e1" / "conda-lock.yml"
    locked = lock.read_bytes()

    # `lock --force` re-solves too, and says what moved (text and --json)
    relock = run_envtool("lock", "e1", "--force", "--dry-run", "--json", env=env, cwd=root)
    assert relock.returncode == 0, relock.stderr
    diff = json.loads(relock.stdout)["lock_diff"]
    assert diff["counts"]["upgraded"] == 1 and diff["changes"][0]["name"] == TOOL
    text = run_envtool("lock", "e1", "--force", "--dry-run", env=env, cwd=root)
    assert f"↑ {TOOL} 1.0 → 1.1" in text.stdout

    dry = run_envtool("update", "e1", "--dry-run", "--json", env=env, cwd=root)
    assert dry.returncode == 0, dry.stderr
    changes = json.loads(dry.stdout)["lock_diff"]["changes"]
    assert [(c["name"], c["kind"], c["old"]["version"], c["new"]["version"]) for c in changes] == [
        (TOOL, "upgraded", "1.0", "1.1")
    ]
    assert lock.read_bytes() == locked  # --dry-run writes nothing

    one = run_envtool("update", "e1", TOOL, "--no-install", env=env, cwd=root)
    assert one.returncode == 0, one.stderr
    assert f"↑ {TOOL} 1.0 → 1.1" in one.stdout
    missing = run_envtool("update", "e1", "not-locked", "--no-install", env=env, cwd=root)
    assert missing.returncode == 2 and "not-locked not in the lock" in missing.stderr

    drop = run_envtool("drop", "e1", TOOL, "--no-install", "--json", env=env, cwd=root)
    assert drop.returncode == 0, drop.stderr
    data = json.loads(drop.stdout)
    assert data["edit"]["dropped"] == [TOOL]
    assert [c["kind"] for c in data["lock_diff"]["changes"]] == ["removed"]
    assert TOOL not in _lock_names(root)
    assert f"- {TOOL}\n" not in (root / "environments" / "e1" / "environment.yml").read_text()
    gone = run_envtool("drop", "e1", TOOL, env=env, cwd=root)
    assert gone.returncode == 2 and "is not among the conda dependencies" in gone.stderr
    # pytorch: every re-lock asks for the build --cuda picked again, so a drop would only edit
    # the file ("lock diff: no package changed"); said, and nothing written
    before = (root / "environments" / "e1" / "environment.yml").read_bytes()
    torch = run_envtool("drop", "e1", "pytorch", "--no-install", env=env, cwd=root)
    assert torch.returncode == 2 and "built around" in torch.stderr, torch.stderr
    assert (root / "environments" / "e1" / "environment.yml").read_bytes() == before


def test_add_relocks_every_variant(project) -> None:
    root, _, env = project
    out = run_envtool("lock", "e1", "--variants", "cpu,cuda12.6", env=env, cwd=root)
    assert out.returncode == 0, out.stderr
    added = run_envtool("add", "e1", TOOL, "--no-install", "--json", env=env, cwd=root)
    assert added.returncode == 0, added.stderr
    data = json.loads(added.stdout)
    by_variant = {v["name"]: v["lock_diff"]["changes"] for v in data["variants"]}
    assert set(by_variant) == {"cpu", "cuda12.6"}
    for changes in by_variant.values():
        assert [(c["name"], c["kind"]) for c in changes] == [(TOOL, "added")]
    assert TOOL in _lock_names(root)  # conda-lock.yml too


# ------------------------------------------------------------------ the edit itself (pure)


def test_the_edit_keeps_comments_order_and_pip() -> None:
    text = (
        "# top\nname: x\ndependencies:\n  - python=3.11  # keep\n  - numpy  # old pin\n"
        "  # a note\n  - pip:\n      - requests\nvariables:\n  A: b\n"
    )
    edit = edit_dependencies(
        text, "e.yml", [parse_conda_spec("numpy>=2"), parse_conda_spec("scipy")], ["python"]
    )
    assert edit.text == (
        "# top\nname: x\ndependencies:\n  - numpy>=2  # old pin\n  - scipy\n"
        "  # a note\n  - pip:\n      - requests\nvariables:\n  A: b\n"
    )
    assert edit.replaced == (("numpy", "numpy>=2"),) and edit.dropped == ("python=3.11",)
    assert not edit.notes


def test_a_flow_list_is_written_again_and_says_so() -> None:
    edit = edit_dependencies("dependencies: [a, b]\n", "e.yml", [parse_conda_spec("c")], ["a"])
    assert edit.text == "dependencies:\n  - b\n  - c\n"
    assert "comments dropped" in edit.notes[0]


def test_a_hostile_spec_cannot_inject_yaml() -> None:
    # a spec argument with a newline or YAML syntax is a scalar in the file, never structure
    edit = edit_dependencies("dependencies:\n  - a\n", "e.yml", [parse_conda_spec("b # x")], [])
    assert edit.text == 'dependencies:\n  - a\n  - "b # x"\n'
    from envtool.core.spec import parse_environment_yml

    names = [d.name for d in parse_environment_yml(edit.text, "e.yml").dependencies]
    assert names == ["a", "b"]


def test_n_name_is_the_same_as_name_for_add_update_and_drop(project) -> None:
    """`-n NAME` (conda's spelling, issue 21's one way to name an environment) on the package
    verbs: every positional after it is a package, and the result is the positional form's."""
    root, channel, env = project
    yml = root / "environments" / "e1" / "environment.yml"
    lock = root / "environments" / "e1" / "conda-lock.yml"
    by_name = run_envtool("add", "e1", TOOL, "--dry-run", "--json", env=env, cwd=root)
    by_flag = run_envtool("add", "-n", "e1", TOOL, "--dry-run", "--json", env=env, cwd=root)
    assert by_name.returncode == by_flag.returncode == 0, by_flag.stderr
    assert json.loads(by_flag.stdout)["edit"] == json.loads(by_name.stdout)["edit"]
    assert json.loads(by_flag.stdout)["edit"]["added"] == [TOOL]

    out = run_envtool("add", "--name", "e1", TOOL, "--no-install", env=env, cwd=root)
    assert out.returncode == 0, out.stderr
    assert f"  - {TOOL}\n" in yml.read_text() and TOOL in _lock_names(root)
    cb.build_channel(channel, [_tool("1.1")])
    out = run_envtool("update", "-n", "e1", TOOL, "--no-install", env=env, cwd=root)
    assert out.returncode == 0 and f"↑ {TOOL} 1.0 → 1.1" in out.stdout, out.stderr
    out = run_envtool("drop", "-n", "e1", TOOL, "--no-install", env=env, cwd=root)
    assert out.returncode == 0, out.stderr
    assert TOOL not in yml.read_text() and TOOL not in _lock_names(root)

    before = (yml.read_bytes(), lock.read_bytes())
    for args, says in (
        (["add", "-n", "e1"], "envtool add: no package given"),
        (["drop", "e1"], "envtool drop: no package given"),
        (["add", "-n", "../e1", TOOL], "not a valid environment name"),
        (["add", "-n", "e1\x1b]0;x\x07", TOOL], "not a valid environment name"),
    ):
        out = run_envtool(*args, env=env, cwd=root)
        assert out.returncode == 2 and says in out.stderr, (args, out.stderr)
        assert "\x1b" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert (yml.read_bytes(), lock.read_bytes()) == before
