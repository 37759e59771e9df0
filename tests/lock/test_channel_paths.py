"""A relative local channel is read from the file that names it (locate.local_channel), as pixi
reads a manifest's paths: environments/NAME/environment.yml's from the project folder (`create`
writes it relative to the project), a `-f` file's from that file's folder, a settings file's from
its folder, a `--channel` flag's from the current folder. `lock --dir P` from elsewhere read
`./chan` from the current folder. Real solves over a copy of the harvested conda-forge repodata."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envtool.adapters.locate import local_channel, written_channel

pytestmark = pytest.mark.integration


@pytest.fixture
def project(harvested, run_cli, tmp_path) -> Path:
    """tmp/proj with environments/c created from `--channel chan` (recorded as ./chan)."""
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copytree(harvested / "conda-forge", root / "chan")
    code, _, err = run_cli(
        ["create", "c", "--no-install", "--cuda", "cpu", "--channel", "chan"], root
    )
    assert code == 0, err
    assert "channels:\n  - ./chan\n" in (root / "environments/c/environment.yml").read_text()
    return root


def test_lock_dir_reads_the_projects_channel_from_anywhere(project, run_cli, tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "chan").mkdir(parents=True)  # a decoy: an empty ./chan where envtool runs
    code, out, err = run_cli(["lock", "c", "--dir", str(project), "--check"], elsewhere)
    assert code == 0 and "lock is fresh" in out, err
    code, out, err = run_cli(["lock", "c", "--dir", str(project), "--force", "--json"], elsewhere)
    assert code == 0, err
    data = json.loads(out)
    assert data["written"] and data["packages"]["linux-64"] > 10
    lock = (project / "environments" / "c" / "conda-lock.yml").read_text()
    assert (project / "chan").resolve().as_uri() in lock
    assert (elsewhere / "chan").resolve().as_uri() not in lock
    # the package verbs re-lock through the same path
    code, _, err = run_cli(["add", "c", "numpy", "--dir", str(project), "--no-install"], elsewhere)
    assert code == 0, err


def test_export_writes_the_folder_the_projects_channel_names(project, run_cli, tmp_path) -> None:
    """An export lands elsewhere (-o, a pixi.toml): `./chan` there would name another folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    chan = (project / "chan").resolve()
    code, out, err = run_cli(["export", "c", "--dir", str(project), "-o", "out.yml"], elsewhere)
    assert code == 0, err
    assert f"channels:\n  - {chan}\n" in (elsewhere / "out.yml").read_text()
    assert f"warning: channel {chan} is a local folder" in err
    code, out, err = run_cli(["export", "c", "--dir", str(project), "--format", "pixi"], elsewhere)
    assert code == 0, err
    assert f'channels = ["{chan.as_uri()}"]' in out


def test_create_f_reads_the_files_channel_from_its_folder(harvested, run_cli, tmp_path) -> None:
    """~/src/env.yml naming ./chan means ~/src/chan; the project records where that is."""
    src, root = tmp_path / "src", tmp_path / "proj"
    shutil.copytree(harvested / "conda-forge", src / "chan")
    root.mkdir()
    (src / "env.yml").write_text("channels:\n  - ./chan\ndependencies:\n  - python\n  - pytorch\n")
    code, _, err = run_cli(
        ["create", "c", "-f", str(src / "env.yml"), "--no-install", "--cuda", "cpu"], root
    )
    assert code == 0, err
    yml = (root / "environments" / "c" / "environment.yml").read_text()
    assert f"channels:\n  - {(src / 'chan').resolve()}\n" in yml  # outside the project: absolute
    code, _, err = run_cli(["lock", "c", "--force"], root)  # and the project re-locks from it
    assert code == 0, err
    # inside the project, relative to the project
    shutil.move(src, root / "src")
    code, _, err = run_cli(
        ["create", "d", "-f", "src/env.yml", "--no-install", "--cuda", "cpu"], root
    )
    assert code == 0, err
    assert "channels:\n  - ./src/chan\n" in (root / "environments/d/environment.yml").read_text()


def test_a_settings_files_channel_is_read_from_its_folder(
    harvested, run_cli, tmp_path, monkeypatch
) -> None:
    config = tmp_path / "cfg"
    shutil.copytree(harvested / "conda-forge", config / "envtool" / "chan")
    (config / "envtool" / "config.toml").write_text('default-channels = ["./chan"]\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.delenv("ENVTOOL_CHANNELS", raising=False)
    root = tmp_path / "proj"
    root.mkdir()
    (root / "env.yml").write_text("dependencies:\n  - python\n  - pytorch\n")  # no channels
    code, _, err = run_cli(["create", "c", "-f", "env.yml", "--no-install", "--cuda", "cpu"], root)
    monkeypatch.delenv("ENVTOOL_CHANNELS", raising=False)  # the group set it from the file
    assert code == 0, err
    yml = (root / "environments" / "c" / "environment.yml").read_text()
    assert f"channels:\n  - {(config / 'envtool' / 'chan').resolve()}\n" in yml


@pytest.mark.parametrize(
    "channel",
    [
        "./$(touch pwned)",
        "./`touch pwned`",
        "./chan; touch pwned",
        "../../../../../../../../nowhere",
    ],
)
def test_a_hostile_channel_path_in_a_file_is_a_path_never_shell_text(
    channel, run_cli, tmp_path
) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "env.yml").write_text(
        f"channels:\n  - '{channel}'\ndependencies:\n  - python\n  - pytorch\n"
    )
    code, out, err = run_cli(
        ["create", "c", "-f", "env.yml", "--no-install", "--cuda", "cpu"], root
    )
    assert code == 2 and out == ""
    error = [line for line in err.splitlines() if line.startswith("envtool: error:")]
    assert len(error) == 1 and "no such directory" in error[0], err
    assert not list(tmp_path.rglob("pwned")) and not (root / "environments").exists()


def test_local_channel_and_written_channel(tmp_path, monkeypatch) -> None:
    proj, outside = tmp_path / "proj", tmp_path / "outside"
    (proj / "ch").mkdir(parents=True)
    outside.mkdir()
    monkeypatch.chdir(proj)
    for name in ("conda-forge", "pytorch/label/nightly", "https://example.org/ch/"):
        assert local_channel(name) is None and written_channel(name) == name
    assert local_channel("./ch") == local_channel("ch") == (proj / "ch").resolve()
    assert local_channel("./ch", outside) == (outside / "ch").resolve()  # from the file's folder
    assert local_channel("ch", outside) is None  # a bare name is a folder only where it is one
    (outside / "ch").mkdir()
    assert local_channel("ch", outside) is None  # ... and only as a flag: in a file, a name
    assert local_channel(str(outside), proj) == outside.resolve()
    assert written_channel("~/ch") == "~/ch"
    assert written_channel("./ch") == written_channel("ch") == "./ch"
    assert written_channel("../outside") == str(outside.resolve())
    # --dir: relative to that project when inside it, else absolute
    assert written_channel("ch", str(tmp_path)) == "./proj/ch"
    assert written_channel("ch", str(outside)) == str((proj / "ch").resolve())
    assert written_channel("./ch", str(proj), base=outside) == str((outside / "ch").resolve())


def test_dir_puts_that_projects_envtool_toml_in_force(
    harvested, run_cli, tmp_path, monkeypatch
) -> None:
    """`create --dir P` from elsewhere: P's envtool.toml (its ./chan read from P), not the
    current folder's, as pixi's --manifest-path reads that manifest's settings."""
    monkeypatch.delenv("ENVTOOL_CHANNELS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))
    root, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    shutil.copytree(harvested / "conda-forge", root / "chan")
    (root / "envtool.toml").write_text('default-channels = ["./chan"]\n')
    (root / "env.yml").write_text("dependencies:\n  - python\n  - pytorch\n")
    elsewhere.mkdir()
    (elsewhere / "envtool.toml").write_text('default-channels = ["./not-this-one"]\n')
    args = ["create", "c", "-f", str(root / "env.yml"), "--no-install", "--cuda", "cpu"]
    code, _, err = run_cli([*args, "--dir", str(root)], elsewhere)
    monkeypatch.delenv("ENVTOOL_CHANNELS", raising=False)
    assert code == 0, err
    assert "channels:\n  - ./chan\n" in (root / "environments/c/environment.yml").read_text()
    code, _, err = run_cli(args, elsewhere)  # without --dir: the current folder's settings
    monkeypatch.delenv("ENVTOOL_CHANNELS", raising=False)
    assert code == 2 and "not-this-one: no such directory" in err


def test_a_folder_named_like_a_channel_does_not_stand_in_for_it(
    harvested, run_cli, tmp_path
) -> None:
    """A cloned repository whose environment.yml says `conda-forge` and that ships a folder
    `conda-forge/` (a channel of its own): the name is conda-forge's, as conda and rattler read
    it, never the folder's. Here no conda channel is reachable, so the solve fails naming
    conda.anaconda.org; before, it solved quietly from the repository's folder."""
    root = tmp_path / "repo"
    shutil.copytree(harvested / "conda-forge", root / "conda-forge")
    (root / "env.yml").write_text(
        "channels:\n  - conda-forge\ndependencies:\n  - python\n  - pytorch\n"
    )
    code, out, err = run_cli(
        ["create", "c", "-f", "env.yml", "--no-install", "--cuda", "cpu", "--offline"], root
    )
    assert code != 0 and (root / "conda-forge").resolve().as_uri() not in out + err, err
    assert not (root / "environments" / "c" / "conda-lock.yml").exists()
