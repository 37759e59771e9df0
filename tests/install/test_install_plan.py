"""`envtool install`: plan, then apply (issue 13 item 4). The plan `--dry-run` prints is the plan
the install executes, and one install reads its lock once. In-process (run_cli), so the plan
handed to the apply step and every read of the lock file can be watched."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import channel_builder as cb
import pytest

from envtool.core.install_plan import render_bytes

pytestmark = pytest.mark.integration

ENVELOPE = {"version", "command", "exit_code", "dry_run", "name", "download"}


@pytest.fixture
def project(setup: cb.CudaSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo project, with this test's envs dir and caches (as conftest's `env` sets them)."""
    monkeypatch.setenv("ENVTOOL_ENVS_DIR", str(tmp_path / "envs"))
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENVTOOL_DRIVER_VERSION", "570.86.10")
    for var in ("ENVTOOL_TEST_PAUSE_AT", "ENVTOOL_TEST_PAUSE_S", "CONDA_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    return setup.lock.parent.parent.parent  # <project>/environments/demo/conda-lock.yml


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Every read of a lock file's bytes (files.read_bytes, under lock_io.read_lock, the one
    reader), and every plan handed to the apply step."""
    from envtool.adapters import files
    from envtool.adapters.install import installer

    seen: dict[str, list[Any]] = {"lock_reads": [], "applied": []}
    read_bytes, apply_install = files.read_bytes, installer.apply_install

    def counted_read(path: Any, *args: Any, **kwargs: Any) -> bytes:
        if kwargs.get("what") == "lock file":
            seen["lock_reads"].append(Path(path))
        return read_bytes(path, *args, **kwargs)

    def watched_apply(plan: Any, *args: Any, **kwargs: Any) -> Any:
        seen["applied"].append(plan)
        return apply_install(plan, *args, **kwargs)

    monkeypatch.setattr(files, "read_bytes", counted_read)
    monkeypatch.setattr(installer, "apply_install", watched_apply)
    return seen


def _json(run_cli: Callable[..., tuple[int, str, str]], args: list[str], cwd: Path) -> dict:
    code, out, err = run_cli(args, cwd=cwd)
    assert code == 0, err
    return json.loads(out)


def test_the_dry_run_plan_is_the_plan_the_install_executes(
    project: Path, watch: dict[str, list[Any]], run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    dry = _json(run_cli, ["install", "demo", "--dry-run", "--json"], project)
    assert len(watch["lock_reads"]) == 1 and not watch["applied"]
    plan = {k: v for k, v in dry.items() if k not in ENVELOPE}
    assert plan["host_check"] == "ok" and plan["install_state"] is None
    assert plan["reuse"] == [] and plan["from_package_cache"] == []
    assert sorted(plan["fetch"]) == sorted(plan["link"]) and len(plan["link"]) == 5
    assert len(plan["pip"]) == 1 and len(plan["packages"]) == 6
    # the download the dry run announces: the 5 archives and the wheel, sized where known
    download = dry["download"]
    assert (download["packages"], download["cached"]) == (6, 0), download
    sizes = [Path(p["url"].removeprefix("file://")).stat().st_size for p in plan["packages"]]
    assert download["unknown"] == 0 and download["bytes"] == sum(sizes) > 0, download
    code, out, _ = run_cli(["install", "demo", "--dry-run"], cwd=project)
    assert (
        code == 0 and out.splitlines()[-1] == f"download: {render_bytes(sum(sizes))} in 6 packages"
    )

    watch["lock_reads"].clear()
    report = _json(run_cli, ["install", "demo", "--json"], project)
    assert len(watch["lock_reads"]) == 1, watch["lock_reads"]  # the lock read once
    (applied,) = watch["applied"]
    # the very plan the dry run printed, field for field, is what the apply step was given
    assert json.loads(json.dumps(applied.to_dict())) == plan
    # and what it did: the report's fields are the plan's
    for key in ("prefix", "lock_path", "lock_sha256", "platform"):
        assert report[key] == plan[key], key
    assert sorted(report["fetched"]) == sorted(plan["fetch"])
    assert report["reused"] == plan["reuse"] and report["refetched"] == []
    assert report["from_package_cache"] == plan["from_package_cache"]
    assert report["conda_packages"] == len(plan["link"])
    assert report["pip_packages"] == len(plan["pip"])

    # again: the plan now reuses every archive, and so does the install
    watch["lock_reads"].clear()
    watch["applied"].clear()
    again = _json(run_cli, ["install", "demo", "--dry-run", "--json"], project)
    assert again["install_state"] == "complete" and again["fetch"] == []
    assert sorted(again["reuse"]) == sorted(plan["link"])
    report = _json(run_cli, ["install", "demo", "--json"], project)
    assert len(watch["lock_reads"]) == 2  # once per command
    assert report["fetched"] == [] and sorted(report["reused"]) == sorted(again["reuse"])
    (applied,) = watch["applied"]
    assert json.loads(json.dumps(applied.to_dict())) == {
        k: v for k, v in again.items() if k not in ENVELOPE
    }


def test_force_is_the_plan_s_host_verdict(
    project: Path, watch: dict[str, list[Any]], run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    dry = _json(run_cli, ["install", "demo", "--dry-run", "--json", "--force"], project)
    assert dry["host_check"] == "skipped (--force)"
    assert len(watch["lock_reads"]) == 1


def test_the_download_line_says_what_it_knows() -> None:
    from envtool.core.install_plan import render_download

    assert render_bytes(999) == "999 B" and render_bytes(1_536_000) == "1.5 MB"
    assert render_bytes(2_400_000_000) == "2.4 GB"
    line = render_download({"packages": 3, "bytes": 2_000_000, "unknown": 0, "cached": 2})
    assert line == "download: 2.0 MB in 3 packages (2 cached)"
    line = render_download({"packages": 3, "bytes": 2_000_000, "unknown": 1, "cached": 0})
    assert line == "download: at least 2.0 MB (1 of them of unknown size) in 3 packages"
    assert render_download({"packages": 2, "bytes": 0, "unknown": 2, "cached": 0}) == (
        "download: size unknown in 2 packages"
    )
    assert render_download({"packages": 0, "bytes": 0, "unknown": 0, "cached": 4}) == (
        "download: nothing (all 4 packages cached)"
    )


@pytest.mark.integration
def test_the_dry_run_sizes_a_remote_channels_archives_from_its_repodata(
    setup: cb.CudaSetup, project: Path, run_cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    """The lock records no sizes: a remote channel's repodata gives them (a real HTTP mirror of
    the built channel); a mirror that is down leaves them unknown, counted, and no error."""
    import shutil
    import socket

    from mirror_server import Faults, MirrorServer

    root = tmp_path / "mirror"
    shutil.copytree(setup.channel, root)
    lock = tmp_path / "lock" / "conda-lock.yml"
    lock.parent.mkdir()
    with MirrorServer(root, Faults()) as server:
        lock.write_text(setup.lock.read_text().replace(setup.channel.as_uri(), server.url))
        dry = _json(
            run_cli,
            [
                "install",
                "--lock",
                str(lock),
                "--prefix",
                str(tmp_path / "p"),
                "--dry-run",
                "--json",
            ],
            tmp_path,
        )
    conda = [p for p in dry["packages"] if p["manager"] == "conda"]
    assert conda and all(p["url"].startswith("http://") for p in conda)
    expected = sum(
        (root / p["url"].split(server.url, 1)[1].lstrip("/")).stat().st_size for p in conda
    )
    pip = [p for p in dry["packages"] if p["manager"] == "pip"]
    expected += sum(Path(p["url"].removeprefix("file://")).stat().st_size for p in pip)
    assert dry["download"] == {"packages": 6, "bytes": expected, "unknown": 0, "cached": 0}

    with socket.socket() as s:  # a port nobody listens on: the mirror is down
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    lock.write_text(setup.lock.read_text().replace(setup.channel.as_uri(), dead))
    code, out, err = run_cli(
        ["install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), "--dry-run"], tmp_path
    )
    assert code == 0, err
    assert out.splitlines()[-1].startswith("download: at least "), out
    assert "(5 of them of unknown size) in 6 packages" in out.splitlines()[-1]
