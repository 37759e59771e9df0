"""`envtool install NAME` over variant locks, for real: the variant this host runs is chosen (one
line why), `--variant` overrides with the host check, `--dry-run` shows the choice, nothing that
fits is refused with the fix — and the chosen lock is installed from a channel channel_builder
builds. The host is this machine with its driver set through ENVTOOL_DRIVER_VERSION, or taken
away with CONDA_OVERRIDE_CUDA="" (the probe's overrides), so the tests mean the same on any host."""

from __future__ import annotations

import json
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool

pytestmark = pytest.mark.integration

STUB = Path("lib") / f"python{cb.PY_VER}" / "site-packages" / "torch_stub" / "__init__.py"


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cb.build_channel(
        tmp_path_factory.mktemp("variants") / "channel", cb.cuda_graph() + cb.cuda118_pkgs()
    )


@pytest.fixture
def project(channel: Path, tmp_path: Path, env: dict[str, str]) -> Path:
    env_dir = tmp_path / "environments" / "demo"
    env_dir.mkdir(parents=True)
    (env_dir / "environment.yml").write_text(
        f"name: demo\nchannels:\n  - {channel}\ndependencies:\n  - python\n  - pytorch\n"
    )
    r = run_envtool("lock", "demo", "--variants", "cpu,cuda11.8,cuda12.6", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path


def install(project: Path, env: dict[str, str], driver: str | None, *args: str):
    e = dict(env)
    e.pop("ENVTOOL_DRIVER_VERSION", None)
    if driver:
        e["ENVTOOL_DRIVER_VERSION"] = driver
    else:  # no driver, also on a test host that has one (conda's convention: empty = no CUDA)
        e["CONDA_OVERRIDE_CUDA"] = ""
    return run_envtool("install", "demo", *args, env=e, cwd=project)


def installed_build(env: dict[str, str]) -> str:
    return (Path(env["ENVTOOL_ENVS_DIR"]) / "demo" / STUB).read_text()


@pytest.mark.slow
def test_each_host_gets_its_variant_and_says_why(project: Path, env: dict[str, str]) -> None:
    r = install(project, env, "535.104.05", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert (
        "variant cuda11.8: driver 535.104.05 → cuda11.8 variant; cuda12.6 needs ≥ 560.28.03"
        in r.stderr
    )
    assert "conda-lock.cuda11.8.yml" in r.stdout
    assert not (Path(env["ENVTOOL_ENVS_DIR"]) / "demo").exists()  # a dry run

    r = install(project, env, "570.86.10")
    assert r.returncode == 0, r.stderr
    assert "variant cuda12.6: driver 570.86.10 → cuda12.6 variant" in r.stderr
    assert installed_build(env) == "BUILD = 'cuda126'\n"

    r = install(project, env, None)  # this host as it is: no NVIDIA driver
    assert r.returncode == 0, r.stderr
    assert "variant cpu: " in r.stderr and "→ cpu variant" in r.stderr
    assert installed_build(env) == "BUILD = 'cpu'\n"


def test_install_json_says_which_variant_and_why(project: Path, env: dict[str, str]) -> None:
    """--json carries the choice the note prints: variant, mode and the one-line reason (dry run
    and a real install alike); an install from --lock chose no variant and says none."""
    r = install(project, env, "535.104.05", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["variant"] == {
        "variant": "cuda11.8",
        "mode": "native",
        "reason": "driver 535.104.05 → cuda11.8 variant; cuda12.6 needs ≥ 560.28.03",
    }
    r = install(project, env, "535.104.05", "--variant", "cuda12.6", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["variant"]["variant"] == "cuda12.6" and data["variant"]["mode"] == "compat"
    assert "minor-version compatibility" in data["variant"]["reason"]
    assert installed_build(env) == "BUILD = 'cuda126'\n"
    lock = project / "environments" / "demo" / "conda-lock.cpu.yml"
    r = install(project, env, None, "--lock", str(lock), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert "variant" not in json.loads(r.stdout)


@pytest.mark.slow
def test_variant_override_is_host_checked(project: Path, env: dict[str, str]) -> None:
    r = install(project, env, "535.104.05", "--variant", "cuda12.6")
    assert r.returncode == 0, r.stderr  # 535 runs 12.6 through minor-version compatibility
    assert "minor-version compatibility" in r.stderr
    assert installed_build(env) == "BUILD = 'cuda126'\n"

    r = install(project, env, "470.82.01", "--variant", "cuda12.6")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "envtool: error: --variant cuda12.6: cuda12.6 needs ≥ 560.28.03 (driver 470.82.01) — "
        "this host would install cuda11.8; pass --force to install it anyway"
    )
    r = install(project, env, None, "--variant", "cuda11.8", "--force")
    assert r.returncode == 0, r.stderr
    assert installed_build(env) == "BUILD = 'cuda118'\n"

    r = install(project, env, None, "--variant", "cpu")
    assert r.returncode == 0, r.stderr
    assert installed_build(env) == "BUILD = 'cpu'\n"

    for bad, message in (
        ("cuda13.0", "--variant cuda13.0: demo's lock has no such variant"),
        ("gpu", "--variant gpu: not a variant name"),
    ):
        r = install(project, env, None, "--variant", bad)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_nothing_fits_refuses_with_the_fix(project: Path, env: dict[str, str]) -> None:
    # cuda-only variants and a driver too old for any of them
    r = run_envtool("lock", "demo", "--variants", "cuda11.8,cuda12.6", env=env, cwd=project)
    assert r.returncode == 0, r.stderr
    r = install(project, env, "418.43", "--dry-run")
    assert r.returncode == 2
    assert "none of demo's variants runs here" in r.stderr
    assert "upgrade the NVIDIA driver to ≥ 520.61.05 (cuda11.8; ≥ 560.28.03 runs cuda12.6)" in (
        r.stderr
    )
    r = install(project, env, None, "--dry-run")
    assert r.returncode == 2
    assert "no NVIDIA driver here and demo's lock has no cpu variant" in r.stderr
    assert "envtool lock demo --variants cpu,cuda11.8,cuda12.6" in r.stderr


def test_a_hand_edited_variant_lock_is_not_installed(project: Path, env: dict[str, str]) -> None:
    lock = project / "environments" / "demo" / "conda-lock.cpu.yml"
    lock.write_text(lock.read_text() + "# edited\n")
    r = install(project, env, None, "--dry-run")
    assert r.returncode == 2
    assert "conda-lock.cpu.yml: changed since it was indexed" in r.stderr
    assert "re-lock: `envtool lock demo --variants cpu,cuda11.8,cuda12.6`" in r.stderr


def test_variant_needs_a_name_and_an_index(project: Path, env: dict[str, str]) -> None:
    r = install(project, env, None, "--lock", "x.yml", "--variant", "cpu")
    assert r.returncode == 2 and "--variant picks among variant locks" in r.stderr
    (project / "environments" / "demo" / "variants.yml").unlink()
    r = install(project, env, None, "--variant", "cpu")
    assert r.returncode == 2 and "has no variant locks (variants.yml)" in r.stderr


@pytest.mark.slow
def test_readme_one_lock_many_machines_runs(fixtures: Path, tmp_path: Path, env) -> None:
    """The "One lock for every host" tutorial's transcript, run for real on the fixture channel
    (after the create guide's example): each command's printed lines are what it prints;
    `ENVTOOL_DRIVER_VERSION=…` prefixes are applied; /tmp/proj is this test's folder; `…` stands
    for any text."""
    import shlex

    from readme_commands import blocks, page_text, readme_command

    proj = str(tmp_path)
    fixture_channel = "../shared/fixtures/"
    create = readme_command(
        "envtool create demo --no-install --cuda 12.6 --profile ddp --dir /tmp/proj"
        " --driver 580.65.06 --gpu 9.0"
        " --channel ../shared/fixtures/repodata/harvested-from-pixi-locks/conda-forge"
    )
    argv = [a.replace("/tmp/proj", proj) for a in create.argv]
    argv = [str(fixtures / a.removeprefix(fixture_channel)) if a.startswith(fixture_channel)
            else a for a in argv]  # fmt: skip
    assert run_envtool(*argv, env=env, cwd=tmp_path).returncode == 0

    block = next(
        [line for _, line in b]
        for b in blocks(page_text("docs/tutorials/one-lock-every-host.md"))
        if any("--variants auto" in line for _, line in b)
    )
    steps: list[tuple[str, list[str]]] = []
    for line in block:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    ran = 0
    for command, expected in steps:
        words = shlex.split(command, comments=True)
        if words[0] == "cd":
            continue
        e = {k: v for k, v in env.items() if k != "ENVTOOL_DRIVER_VERSION"}
        while "=" in words[0]:
            key, _, value = words.pop(0).partition("=")
            e[key] = value
        if "ENVTOOL_DRIVER_VERSION" not in e:  # "the laptop", also on a test host with a GPU
            e["CONDA_OVERRIDE_CUDA"] = ""
        assert words[0] == "envtool"
        r = run_envtool(*[w.replace("/tmp/proj", proj) for w in words[1:]], env=e, cwd=tmp_path)
        ran += 1
        printed = (r.stdout + r.stderr).splitlines()
        refused = any(x.startswith("envtool: error:") for x in expected)
        assert r.returncode == (2 if refused else 0), (command, r.stderr)
        for want in expected:
            parts = want.replace("/tmp/proj", proj).split("…")
            assert any(
                all(p in got for p in parts) and got.startswith(parts[0]) for got in printed
            ), (command, want, printed)
    assert ran == 6


@pytest.mark.slow
def test_info_verify_export_and_doctor_know_the_variant(project: Path, env: dict[str, str]) -> None:
    import json

    r = install(project, env, "535.104.05")
    assert r.returncode == 0, r.stderr
    e = {**env, "ENVTOOL_DRIVER_VERSION": "535.104.05"}
    r = run_envtool("info", "demo", env=e, cwd=project)
    assert r.returncode == 0 and "variant        cuda11.8" in r.stdout, r.stdout
    r = run_envtool("verify", "demo", env=e, cwd=project)  # against the installed variant
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        run_envtool("verify", "demo", "--variant", "cuda11.8", env=e, cwd=project).returncode == 0
    )
    r = run_envtool("verify", "demo", "--variant", "cpu", env=e, cwd=project)
    assert r.returncode == 1  # the cpu variant's packages are not what is installed
    r = run_envtool("export", "demo", "--variant", "cpu", env=e, cwd=project)
    assert r.returncode == 0, r.stderr
    assert "pytorch=2.7.1" in r.stdout and "cuda" not in r.stdout.split("pytorch=2.7.1", 1)[1][:20]
    r = run_envtool("export", "demo", "--variant", "cuda12.9", env=e, cwd=project)
    assert r.returncode == 2 and "--variant cuda12.9: demo's lock has no such variant" in r.stderr

    def doctor(driver: str) -> dict:
        r = run_envtool(
            "doctor", "demo", "--json", env={**env, "ENVTOOL_DRIVER_VERSION": driver}, cwd=project
        )
        doc = json.loads(r.stdout)
        return next(c for c in doc["checks"] if c["id"] == "variant-choice")

    assert doctor("535.104.05")["status"] == "ok"
    upgraded = doctor("570.86.10")  # after a driver upgrade
    assert upgraded["status"] == "warn"
    assert upgraded["summary"] == "cuda12.6 now runs here; installed variant is cuda11.8"
    assert upgraded["fix"] == "reinstall to get it: `envtool install demo`"
    # A replay judges the recording alone: the install_lock it names is a path on the recorded
    # machine, so no variants.yml is read from this one (it used to be, here: a warn).
    e = {**env, "ENVTOOL_DRIVER_VERSION": "570.86.10"}
    r = run_envtool("doctor", "demo", "--record", str(project / "rec"), env=e, cwd=project)
    assert r.returncode in (0, 1), r.stderr
    r = run_envtool("doctor", "--replay", str(project / "rec"), "--json", env=env, cwd=project)
    assert r.returncode in (0, 1), r.stderr
    assert all(c["id"] != "variant-choice" for c in json.loads(r.stdout)["checks"])


@pytest.mark.slow
def test_a_bundle_carries_every_variant_and_chooses_offline(
    project: Path, env: dict[str, str]
) -> None:
    bundle = project / "bundle"
    r = run_envtool("bundle", "demo", "-o", str(bundle), "--dry-run", env=env, cwd=project)
    assert r.returncode == 0 and "(every variant)" in r.stdout, r.stderr
    r = run_envtool("bundle", "demo", "-o", str(bundle), env=env, cwd=project)
    assert r.returncode == 0, r.stderr
    assert "variants cpu, cuda11.8, cuda12.6" in r.stdout
    names = sorted(p.name for p in bundle.iterdir())
    assert names == [
        "bundle.json",
        "channel",
        "conda-lock.cpu.yml",
        "conda-lock.cuda11.8.yml",
        "conda-lock.cuda12.6.yml",
        "conda-lock.yml",
        "variants.yml",
    ]
    assert (bundle / "conda-lock.yml").read_bytes() == (bundle / "conda-lock.cpu.yml").read_bytes()
    builds = {p.name for p in (bundle / "channel" / "linux-64").glob("pytorch-*.conda")}
    assert len(builds) == 3  # cpu, cuda118, cuda126
    # the offline machine: the project is gone, the channel too; the bundle chooses
    (project / "environments").rename(project / "moved")
    e = {**env, "ENVTOOL_DRIVER_VERSION": "535.104.05"}
    r = run_envtool("install", "--from", str(bundle), env=e, cwd=project)
    assert r.returncode == 0, r.stderr
    assert "variant cuda11.8: driver 535.104.05 → cuda11.8 variant" in r.stderr
    assert installed_build(env) == "BUILD = 'cuda118'\n"
    r = run_envtool(
        "install", "demo", "--from", str(bundle), "--variant", "cpu", env=e, cwd=project
    )
    assert r.returncode == 0, r.stderr
    assert installed_build(env) == "BUILD = 'cpu'\n"


def test_bundle_dry_run_refuses_a_hand_edited_variant_lock_like_the_bundle(
    project: Path, env: dict[str, str]
) -> None:
    """The dry run makes the bundle's own checks (plan_variant_bundle): a variant lock edited
    by hand since it was indexed is refused by both, in the same line, and nothing is written."""
    lock = project / "environments" / "demo" / "conda-lock.cuda12.6.yml"
    lock.write_text(lock.read_text() + "# edited by hand\n")
    bundle = project / "bundle"
    dry = run_envtool("bundle", "demo", "-o", str(bundle), "--dry-run", env=env, cwd=project)
    real = run_envtool("bundle", "demo", "-o", str(bundle), env=env, cwd=project)
    for r in (dry, real):
        assert r.returncode == 2, r.stderr
        assert f"{lock}: changed since it was indexed" in r.stderr
    assert dry.stderr == real.stderr
    assert not bundle.exists()


def test_bundle_dry_run_refuses_a_lock_entry_without_a_hash(
    project: Path, env: dict[str, str]
) -> None:
    """--lock FILE: an entry with no hash cannot be verified; the dry run says so as the bundle
    does, instead of listing the files."""
    src = project / "environments" / "demo" / "conda-lock.cpu.yml"
    lock = project / "nohash.yml"
    lines = [
        line
        for line in src.read_text().splitlines(keepends=True)
        if not line.strip().startswith(("sha256:", "md5:"))
    ]
    lock.write_text("".join(lines))
    bundle = project / "bundle"
    dry = run_envtool("bundle", "--lock", str(lock), "-o", str(bundle), "--dry-run", env=env)
    real = run_envtool("bundle", "--lock", str(lock), "-o", str(bundle), env=env)
    for r in (dry, real):
        assert r.returncode == 2, r.stderr
        assert "package(s) have no hash" in r.stderr
    assert not bundle.exists()
