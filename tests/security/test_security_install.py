"""Adversarial tests for install, the archive cache, lock reading, bundles, verify and the
@EXPLICIT export: crafted locks, planted links, hostile package records, invalid archives.

Every install is real (py-rattler from channels tests/channel_builder.py builds); every refusal
is checked to be one line, the right exit code, and to leave files outside envtool's places,
the archive cache and a healthy env exactly as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import zipfile
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool, start_envtool

from envtool.adapters import mutex
from envtool.adapters.install import install_state
from envtool.adapters.install.fetch import InstallReport, fetch_verified
from envtool.adapters.install.installed import compute_drift
from envtool.adapters.install.installer import install_from_lock
from envtool.adapters.lockfile.lock_io import read_lock
from envtool.errors import DiagnosedFailure, UsageError

pytestmark = pytest.mark.integration


def _one_line_error(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("envtool: error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _archive(setup: cb.CudaSetup, name: str) -> Path:
    return next(setup.channel.glob(f"*/{name}*.conda"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENVTOOL_ENVS_DIR", str(tmp_path / "envs"))
    return tmp_path / "cache"


# ------------------------------------------------------------ 1. archive names from the lock

HOSTILE_URLS = [
    "linux-64/..%2F..%2Fvictim.conda",  # percent-encoded separators
    "linux-64/..%2f..%2fvictim.conda",
    "linux-64/%2E%2E%2F%2E%2E%2Fvictim.conda",
    "linux-64/x%252F..%252Fvictim.conda",  # double-encoded
    "linux-64/..%5C..%5Cvictim.conda",  # backslashes
    "linux-64/victim%00.conda",  # NUL
    "linux-64/victim%0A.conda",  # newline
    "linux-64/victim%1B%5B31m.conda",  # ESC
    "linux-64/..",
    "linux-64/.conda",
    "linux-64/victim.txt",  # not an archive
    "linux-64/%2Fetc%2Fvictim.conda",  # absolute after decoding
    "..%2F..%2F/victim.conda",  # a hostile subdir
]


@pytest.mark.parametrize("tail", HOSTILE_URLS)
def test_an_archive_name_that_is_not_a_plain_file_name_refuses_the_lock(
    tail: str, setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """Old code: `..%2F` in the URL's last segment wrote (and with a wrong hash deleted) a file
    outside the archive cache."""
    victim = tmp_path / "cache" / "victim.conda"  # where `archives/../victim.conda` lands
    victim.parent.mkdir(parents=True)
    victim.write_text("precious\n")
    base = setup.channel.as_uri()
    lock = cb.edit_lock(
        setup.lock,
        tmp_path / "hostile.yml",
        {"python_abi": {"url": f"{base}/{tail}", "hash": {"sha256": "0" * 64}}},
    )
    for args in (["--dry-run"], []):
        out = run_envtool("install", "demo", "--lock", str(lock), *args, env=env)
        line = _one_line_error(out)
        assert "python_abi" in line and str(lock) in line
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "envs" / "demo").exists()


@pytest.mark.parametrize(
    "edit", [{"version": "1/../../../../victim"}, {"build": "h0/../../x"}, {"version": "2..0"}]
)
def test_a_version_or_build_that_is_a_path_is_refused(
    edit: dict, setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """version and build name rattler's cache folder (`name-version-build`), which a changed
    extracted copy makes envtool delete: never a path."""
    lock = cb.edit_lock(setup.lock, tmp_path / "v.yml", {"libtorch": edit})
    out = run_envtool("install", "demo", "--lock", str(lock), "--dry-run", env=env)
    assert "libtorch" in _one_line_error(out)


def test_a_pip_entry_name_that_is_a_path_or_a_line_is_refused(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    for edit in (
        {"name": "envtool-demo\n--index-url http://evil"},
        {"url": setup.wheel.parent.as_uri() + "/..%2F..%2Fevil.whl"},
    ):
        lock = cb.edit_lock(setup.lock, tmp_path / "pip.yml", {"envtool-demo": edit})
        out = run_envtool("install", "demo", "--lock", str(lock), "--dry-run", env=env)
        assert "envtool-demo" in _one_line_error(out)


# ------------------------------------------------- 2. a refused install keeps what was good


def test_a_refused_install_keeps_the_good_cached_archive_and_the_env_complete(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    assert run_envtool("install", "demo", "--lock", str(setup.lock), env=env).returncode == 0
    good = _archive(setup, "pytorch-2.7.1-cuda126")
    cached = tmp_path / "cache" / "archives" / good.name
    before = cached.read_bytes()
    wrong = cb.edit_lock(
        setup.lock, tmp_path / "wrong.yml", {"pytorch": {"hash": {"sha256": "a" * 64}}}
    )
    out = run_envtool("install", "demo", "--lock", str(wrong), env=env)
    assert "hash mismatch" in _one_line_error(out, 1)
    assert cached.read_bytes() == before  # old code deleted the good copy
    listed = json.loads(run_envtool("list", "--json", env=env).stdout)["environments"]
    assert {r["name"]: r["state"] for r in listed}["demo"] == "complete"  # old: incomplete
    assert run_envtool("verify", "demo", "--lock", str(setup.lock), env=env).returncode == 0


def test_a_link_planted_in_the_archive_cache_is_replaced_not_written_through(
    setup: cb.CudaSetup, cache: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    pkg = next(p for p in read_lock(setup.lock).packages if p.name == "python_abi")
    archives = cache / "archives"
    archives.mkdir(parents=True)
    (archives / pkg.file_name).symlink_to(victim)
    # the old temp name was predictable: ARCHIVE.part<pid>
    (archives / f"{pkg.file_name}.part{os.getpid()}").symlink_to(victim)
    report = InstallReport("", "", "", "linux-64")
    path = fetch_verified(pkg, pkg.url, archives, report)
    assert victim.read_text() == "precious\n"
    assert not path.is_symlink() and cb.sha256_of(path) == pkg.sha256


@pytest.mark.parametrize("swapped_for", ["link", "fifo"])
def test_a_cached_archive_swapped_after_the_listing_is_not_read_through(
    setup: cb.CudaSetup, cache: Path, tmp_path: Path, swapped_for: str
) -> None:
    """fetch_all lists the cache (one lstat per archive) before it checks anything; what sits
    at the name when the check opens it is what counts: a link (even to the genuine archive) is
    not followed and a pipe is not read (it would block), both count as not cached."""
    import threading

    from envtool.adapters.install.archive_check import read_if_matches

    pkg = next(p for p in read_lock(setup.lock).packages if p.name == "python_abi")
    genuine = _archive(setup, "python_abi-")
    assert read_if_matches(genuine, pkg)[0]  # the real file matches
    spot = tmp_path / pkg.file_name
    if swapped_for == "link":
        spot.symlink_to(genuine)
    else:
        os.mkfifo(spot)
    answer: list = []
    reader = threading.Thread(target=lambda: answer.append(read_if_matches(spot, pkg)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert answer == [(False, None)]


# ------------------------------------------------------------------- 4. reading a lock


def test_a_yaml_alias_bomb_lock_is_refused_at_once(env: dict[str, str], tmp_path: Path) -> None:
    rows = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):  # 10**10 strings if expanded (old: ~3 GB, 80 s for a smaller one)
        prev = "a" if i == 1 else f"a{i - 1}"
        rows.append(
            f"a{i}: &a{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]"
        )
    bomb = tmp_path / "bomb.yml"
    bomb.write_text(
        "version: 1\n" + "\n".join(rows) + "\nmetadata:\n  platforms: [*a9]\npackage: []\n"
    )
    out = run_envtool("install", "x", "--lock", str(bomb), "--dry-run", env=env)
    assert "aliases" in _one_line_error(out)


def test_duplicate_keys_in_a_lock_are_refused(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    text = setup.lock.read_text().replace(
        "  manager: conda\n", "  manager: conda\n  manager: pip\n", 1
    )
    lock = tmp_path / "dup.yml"
    lock.write_text(text)
    out = run_envtool("install", "demo", "--lock", str(lock), "--dry-run", env=env)
    assert "duplicate key 'manager'" in _one_line_error(out)


@pytest.mark.parametrize(
    "hashes",
    [
        {"sha256": int("1" * 64)},  # all digits: YAML reads a number (old: silently ignored)
        {"sha256": "1" * 63},
        {"sha256": "g" * 64},
        {"md5": "0" * 31 + "\n"},
        {"md5": ["x"]},
    ],
)
def test_a_hash_that_is_not_hex_of_the_right_length_refuses_the_entry(
    hashes: dict, setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    lock = cb.edit_lock(setup.lock, tmp_path / "h.yml", {"libtorch": {"hash": hashes}})
    out = run_envtool("install", "demo", "--lock", str(lock), "--dry-run", env=env)
    assert "libtorch" in _one_line_error(out)


def test_a_lock_that_is_a_fifo_or_huge_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yml"
    os.mkfifo(fifo)
    assert "not a regular file" in _one_line_error(
        run_envtool("install", "x", "--lock", str(fifo), "--dry-run", env=env, timeout=60)
    )


# --------------------------------------------------- 5. an archive relabelled as another


def test_a_lock_that_relabels_an_archive_is_refused_before_linking(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    other = _archive(setup, "cuda-version-")  # a real package, right hashes, wrong label
    mirror = tmp_path / "mirror" / "linux-64"
    mirror.mkdir(parents=True)
    shutil.copy(other, mirror / "python_abi-3.11-8_cp311.conda")
    lock = cb.edit_lock(
        setup.lock,
        tmp_path / "relabel.yml",
        {
            "python_abi": {
                "url": (mirror / "python_abi-3.11-8_cp311.conda").as_uri(),
                "hash": {"sha256": cb.sha256_of(other), "md5": _md5(other)},
            }
        },
    )
    out = run_envtool("install", "demo", "--lock", str(lock), env=env)
    line = _one_line_error(out)
    assert "python_abi" in line and "the archive is cuda-version 12.6" in line
    assert not (tmp_path / "envs" / "demo" / "conda-meta" / "envtool" / "incomplete.json").exists()
    assert not list((tmp_path / "envs" / "demo").glob("conda-meta/*.json"))


# ------------------------------------------------------------- 6. prefix package records


@pytest.fixture
def demo(setup: cb.CudaSetup, cache: Path, tmp_path: Path) -> Path:
    prefix = tmp_path / "envs" / "demo"
    install_from_lock(setup.lock, prefix, platform="linux-64", progress=False)
    return prefix


def _evil_record(prefix: Path, files: list[str]) -> Path:
    """A complete record (a copy of a real one, as rattler writes them) for a package `evil`
    that is not in the lock, listing `files`: the next install removes what it lists."""
    real = json.loads(next((prefix / "conda-meta").glob("python_abi-*.json")).read_text())
    real.update(name="evil", version="1.0", build="0", fn="evil-1.0-0.conda", files=files)
    real["paths_data"] = {
        "paths_version": 1,
        "paths": [{"_path": f, "path_type": "hardlink", "size_in_bytes": 9} for f in files],
    }
    record = prefix / "conda-meta" / "evil-1.0-0.json"
    record.write_text(json.dumps(real))
    return record


def test_a_record_listing_paths_outside_the_prefix_is_refused_and_nothing_is_removed(
    setup: cb.CudaSetup, demo: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    record = _evil_record(demo, ["../../victim"])
    with pytest.raises(UsageError) as err:
        install_from_lock(setup.lock, demo, platform="linux-64", progress=False)
    assert str(record) in err.value.message and "../../victim" in err.value.message
    assert victim.read_text() == "precious\n" and record.exists()
    assert install_state.read_install_state(demo) == "complete"  # nothing was changed


def test_a_record_path_through_a_symlinked_folder_is_refused(
    setup: cb.CudaSetup, demo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("precious\n")
    (demo / "share" / "out").symlink_to(outside)
    _evil_record(demo, ["share/out/victim"])
    with pytest.raises(UsageError) as err:
        install_from_lock(setup.lock, demo, platform="linux-64", progress=False)
    assert "leads out of the environment" in err.value.message
    assert (outside / "victim").read_text() == "precious\n"


@pytest.mark.parametrize("files", [["../../outside/victim"], ["bin/ok", 7], ["/etc/hostname"]])
def test_verify_reports_a_record_listing_paths_outside_the_prefix_and_reads_none_of_them(
    files: list, setup: cb.CudaSetup, demo: Path, tmp_path: Path
) -> None:
    """verify --full hashed '../..' paths a record listed (a file outside the env, or one that
    blocks when read), and a path that is no string was a TypeError with a traceback."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "victim").write_text("precious\n")
    record = _evil_record(demo, [])
    data = json.loads(record.read_text())
    data["files"] = files
    record.write_text(json.dumps(data))
    drift = compute_drift(demo, setup.lock, "linux-64", check_files=True, full=True)
    assert not drift["clean"] and drift["damaged_records"] == [str(record)]
    assert all(d["name"] != "evil" for d in drift["damaged"])


@pytest.mark.parametrize("content", ["{", "", "[]", '{"name": "python_abi"}', "\x00" * 10])
def test_a_damaged_record_is_set_aside_and_its_package_relinked(
    content: str, setup: cb.CudaSetup, demo: Path
) -> None:
    """Old code: a truncated conda-meta/*.json blocked every later install (rattler refused)."""
    record = next((demo / "conda-meta").glob("python_abi-*.json"))
    record.write_text(content)
    drift = compute_drift(demo, setup.lock, "linux-64", check_files=True)
    assert not drift["clean"] and drift["damaged_records"] == [str(record)]
    install_from_lock(setup.lock, demo, platform="linux-64", progress=False)
    assert json.loads(record.read_text())["name"] == "python_abi"  # relinked: a fresh record
    assert list((demo / "conda-meta" / "envtool" / "damaged").iterdir())
    assert compute_drift(demo, setup.lock, "linux-64", check_files=True)["clean"]


def test_a_package_that_ships_a_conda_meta_record_is_refused(
    env: dict[str, str], tmp_path: Path
) -> None:
    evil_record = json.dumps({"name": "x", "version": "1", "build": "0", "files": ["../../victim"]})
    channel = cb.build_channel(
        tmp_path / "evil-channel",
        [cb.Pkg("evil", "1.0", "h0_0", files={"conda-meta/x-1-0.json": evil_record})],
    )
    lock = cb.write_lock(
        tmp_path / "evil.yml", cb.solve_records(channel, ["evil"], cuda=None), channel.as_uri()
    )
    out = run_envtool("install", "evil", "--lock", str(lock), env=env)
    line = _one_line_error(out)
    assert "conda-meta/x-1-0.json" in line and "evil 1.0" in line
    assert not (tmp_path / "envs" / "evil" / "conda-meta" / "x-1-0.json").exists()


# ------------------------------------------------------ 7. rattler's extracted package cache


def test_a_changed_file_in_the_extracted_cache_is_repaired_and_verify_reports_drift(
    setup: cb.CudaSetup, demo: Path, cache: Path, tmp_path: Path
) -> None:
    extracted = next((cache / "rattler").glob("libtorch-*/lib/libtorch_cuda.so"))
    original = extracted.read_bytes()
    with open(extracted, "r+b") as fh:  # in place: rattler hardlinks, so `demo` changes too
        fh.write(b"X" * len(original))  # same size: only a hash notices
    other = tmp_path / "envs" / "other"
    install_from_lock(setup.lock, other, platform="linux-64", progress=False)
    assert (other / "lib" / "libtorch_cuda.so").read_bytes() == original  # old: the changed file

    # demo shares the changed inode (a hardlink): modified after linking, another sha256
    drift = compute_drift(demo, setup.lock, "linux-64", check_files=True)
    assert [(r["name"], r["changed_files"]) for r in drift["damaged"]] == [("libtorch", 1)]
    install_from_lock(setup.lock, demo, platform="linux-64", progress=False)  # relinks it
    assert (demo / "lib" / "libtorch_cuda.so").read_bytes() == original
    assert compute_drift(demo, setup.lock, "linux-64", check_files=True, full=True)["clean"]


@pytest.mark.parametrize("swap", ["fifo", "dev-zero"])
def test_a_fifo_or_dev_zero_in_an_extracted_cache_entry_does_not_hang_an_install(
    setup: cb.CudaSetup,
    demo: Path,
    cache: Path,
    env: dict[str, str],
    tmp_path: Path,
    swap: str,
) -> None:
    """A shared RATTLER_CACHE_DIR: another user swaps an entry's info/index.json for a FIFO (the
    check's read blocked forever) or a link to /dev/zero (it read without end). The entry is
    not the archive's: it is extracted again, and the install finishes."""
    entry = next(p for p in (cache / "rattler").glob("libtorch-*") if p.is_dir())
    index = entry / "info" / "index.json"
    original = index.read_bytes()
    index.unlink()
    if swap == "fifo":
        os.mkfifo(index)
    else:
        index.symlink_to("/dev/zero")
    out = run_envtool("install", "other", "--lock", str(setup.lock), env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert index.read_bytes() == original  # extracted again
    assert (tmp_path / "envs" / "other" / "lib" / "libtorch_cuda.so").is_file()


def test_verify_full_flag_reports_a_changed_file(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    assert run_envtool("install", "demo", "--lock", str(setup.lock), env=env).returncode == 0
    target = tmp_path / "envs" / "demo" / "share" / "cuda-version" / "VERSION"
    before = target.stat()
    target.write_bytes(b"9" * before.st_size)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same mtime
    assert run_envtool("verify", "demo", env=env).returncode == 0  # only a hash can tell
    out = run_envtool("verify", "demo", "--full", env=env)
    assert out.returncode == 1 and "damaged  cuda-version: 1 file changed" in out.stdout


# ------------------------------------------------- 8. a right-hash file that is no package


def _bogus_archives(tmp_path: Path, setup: cb.CudaSetup) -> dict[str, Path]:
    good = _archive(setup, "python_abi-").read_bytes()
    out = {}
    for kind in ("random", "zip-without-parts", "truncated", "zstd-garbage"):
        path = tmp_path / kind / "linux-64" / "python_abi-3.11-8_cp311.conda"
        path.parent.mkdir(parents=True)
        if kind == "random":
            path.write_bytes(random.Random(1).randbytes(5000))
        elif kind == "zip-without-parts":
            with zipfile.ZipFile(path, "w") as zf:
                zf.writestr("hello.txt", "x")
        elif kind == "truncated":
            path.write_bytes(good[: len(good) // 2])
        else:
            with zipfile.ZipFile(path, "w") as zf:
                zf.writestr("metadata.json", '{"conda_pkg_format_version":2}')
                zf.writestr(
                    "info-python_abi-3.11-8_cp311.tar.zst", b"\x28\xb5\x2f\xfd" + b"\x00" * 64
                )
                zf.writestr(
                    "pkg-python_abi-3.11-8_cp311.tar.zst", b"\x28\xb5\x2f\xfd" + b"\x00" * 64
                )
        out[kind] = path
    return out


def test_an_archive_with_the_right_hash_that_is_no_package_is_refused_every_time(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """Old code crashed the interpreter (exit -6 PyGILState_Release, or -11) in ~1/3 of runs."""
    for kind, bad in _bogus_archives(tmp_path, setup).items():
        lock = cb.edit_lock(
            setup.lock,
            tmp_path / f"{kind}.yml",
            {
                "python_abi": {
                    "url": bad.as_uri(),
                    "hash": {"sha256": cb.sha256_of(bad), "md5": _md5(bad)},
                }
            },
        )
        for i in range(5 if kind == "random" else 2):
            e = dict(env, ENVTOOL_CACHE_DIR=str(tmp_path / f"cache-{kind}-{i}"))
            out = run_envtool("install", f"e{i}", "--lock", str(lock), env=e)
            line = _one_line_error(out)
            assert "python_abi" in line and "not a" in line, line
            assert not (
                tmp_path / "envs" / f"e{i}" / "conda-meta" / "envtool" / "incomplete.json"
            ).exists()


# ---------------------------------------------------------------------------- 9. bundles


def test_a_bundle_does_not_replace_an_existing_env_of_its_name(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    out = run_envtool("bundle", "--lock", str(setup.lock), "-o", str(tmp_path / "b"), env=env)
    assert out.returncode == 0, out.stderr
    manifest = tmp_path / "b" / "bundle.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "name": "mine"}))
    # `mine` is another env (another lock: only cuda-version)
    small = cb.write_lock(
        tmp_path / "small.yml",
        cb.solve_records(setup.channel, ["cuda-version 12.6.*"]),
        setup.channel.as_uri(),
    )
    assert run_envtool("install", "mine", "--lock", str(small), env=env).returncode == 0
    before = sorted(p.name for p in (tmp_path / "envs" / "mine" / "conda-meta").glob("*.json"))
    out = run_envtool("install", "--from", str(tmp_path / "b"), env=env)
    assert "'mine'" in _one_line_error(out) and "already holds" in out.stderr
    assert (
        sorted(p.name for p in (tmp_path / "envs" / "mine" / "conda-meta").glob("*.json")) == before
    )
    # named explicitly, it is the user's choice; a re-run of the same bundle converges
    assert run_envtool("install", "mine", "--from", str(tmp_path / "b"), env=env).returncode == 0
    assert run_envtool("install", "--from", str(tmp_path / "b"), env=env).returncode == 0


def test_a_bundle_whose_lock_is_a_symlink_is_refused(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """DIR/conda-lock.yml is read without following a link (like bundle.json): a link there
    could point the install at any lock on the machine."""
    out = run_envtool("bundle", "--lock", str(setup.lock), "-o", str(tmp_path / "b"), env=env)
    assert out.returncode == 0, out.stderr
    lock = tmp_path / "b" / "conda-lock.yml"
    lock.rename(tmp_path / "elsewhere.yml")
    lock.symlink_to(tmp_path / "elsewhere.yml")
    for extra in ([], ["--dry-run"]):
        out = run_envtool("install", "e", "--from", str(tmp_path / "b"), *extra, env=env)
        line = _one_line_error(out)
        assert "conda-lock.yml" in line and "symbolic link" in line, line
    assert not (tmp_path / "envs" / "e").exists()


def test_a_bundle_refuses_an_env_of_its_name_created_while_it_waited(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """The replace check runs with the env lock held: an env that appears while `install --from`
    waits for that lock (a concurrent create) is refused, not installed over."""
    out = run_envtool("bundle", "--lock", str(setup.lock), "-o", str(tmp_path / "b"), env=env)
    assert out.returncode == 0, out.stderr
    manifest = tmp_path / "b" / "bundle.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "name": "mine"}))
    small = cb.write_lock(
        tmp_path / "small.yml",
        cb.solve_records(setup.channel, ["cuda-version 12.6.*"]),
        setup.channel.as_uri(),
    )
    assert run_envtool("install", "other", "--lock", str(small), env=env).returncode == 0
    mine = tmp_path / "envs" / "mine"
    assert not mine.exists()
    with mutex.hold_env_mutex(mine, "mine"):
        proc = start_envtool("install", "--from", str(tmp_path / "b"), env=env)
        assert proc.stderr is not None
        for line in proc.stderr:  # it holds the bundle folder's lock and waits for the env's
            if "waiting for another envtool on mine" in line:
                break
        else:
            proc.wait()
            pytest.fail("install --from did not wait for the env lock")
        (tmp_path / "envs" / "other").rename(mine)  # what a create holding the lock leaves
    before = sorted(p.name for p in (mine / "conda-meta").glob("*.json"))
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr
    assert "'mine'" in stderr and "already holds" in stderr, stderr
    assert sorted(p.name for p in (mine / "conda-meta").glob("*.json")) == before


def test_an_offline_install_with_a_wheel_missing_from_the_bundle_fails_naming_it(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    assert (
        run_envtool(
            "bundle", "--lock", str(setup.lock), "-o", str(tmp_path / "b"), env=env
        ).returncode
        == 0
    )
    wheel = next((tmp_path / "b" / "channel" / "pypi").glob("*.whl"))
    wheel.unlink()  # the lock's original file:// URL still exists: old code fetched it
    out = run_envtool("install", "demo", "--from", str(tmp_path / "b"), env=env)
    assert wheel.name in _one_line_error(out)
    assert not (tmp_path / "envs" / "demo").exists()


def test_a_bundle_manifest_that_is_a_link_is_refused(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    assert (
        run_envtool(
            "bundle", "--lock", str(setup.lock), "-o", str(tmp_path / "b"), env=env
        ).returncode
        == 0
    )
    manifest = tmp_path / "b" / "bundle.json"
    (tmp_path / "elsewhere.json").write_text(manifest.read_text())
    manifest.unlink()
    manifest.symlink_to(tmp_path / "elsewhere.json")
    out = run_envtool("install", "--from", str(tmp_path / "b"), env=env)
    assert "symbolic link" in _one_line_error(out)


# ------------------------------------------------------------------- 11. test hooks


def test_the_old_pause_variables_do_nothing(setup: cb.CudaSetup, env: dict[str, str]) -> None:
    """ENVTOOL_TEST_PAUSE_AT/S were honoured in normal use (and a bad value crashed)."""
    e = dict(env, ENVTOOL_TEST_PAUSE_AT="after-download", ENVTOOL_TEST_PAUSE_S="soon")
    out = run_envtool("install", "demo", "--lock", str(setup.lock), env=e, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "PAUSED AT" not in out.stderr and "pausing" not in out.stderr


# ------------------------------------------------------- 5. lock --check: the lock's own content


def test_lock_check_reports_a_lock_whose_url_and_sha256_were_edited(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "environment.yml").write_text(
        f"name: e\nchannels:\n  - {setup.channel.as_uri()}\ndependencies:\n  - pytorch 2.7.*\n"
    )
    args = ["--channel", str(setup.channel), "--cuda", "12.6", "--driver", "570.86.10"]
    made = run_envtool(
        "create", "e", "-f", "environment.yml", "--no-install", *args, env=env, cwd=project
    )
    assert made.returncode == 0, made.stderr
    assert run_envtool("lock", "e", "--check", env=env, cwd=project).returncode == 0
    lock = project / "environments" / "e" / "conda-lock.yml"
    good = lock.read_text()
    pkg = next(p for p in read_lock(lock).packages if p.name == "libtorch")
    evil = tmp_path / "evil" / pkg.file_name
    evil.parent.mkdir()
    evil.write_bytes(b"not the package")
    lock.write_text(good.replace(pkg.url, evil.as_uri()).replace(pkg.sha256, cb.sha256_of(evil)))
    out = run_envtool("lock", "e", "--check", env=env, cwd=project)
    assert out.returncode == 1 and "edited since envtool wrote it" in out.stderr, out.stderr
    # the no-op re-lock does not keep the edited lock either: it solves again
    relock = run_envtool("lock", "e", env=env, cwd=project)
    assert relock.returncode == 0, relock.stderr
    assert evil.as_uri() not in lock.read_text()
    assert run_envtool("lock", "e", "--check", env=env, cwd=project).returncode == 0


# ---------------------------------------------------------- 10. export --format explicit


def _explicit_lock(path: Path, n: int, content_hash: str = "c" * 64, md5: str = "a" * 32) -> Path:
    """A v1 lock of n conda packages in one dependency chain (p0 <- p1 <- … <- pN-1)."""
    rows = [
        "version: 1",
        "metadata:",
        f"  content_hash: {{linux-64: {json.dumps(content_hash)}}}",
        "  channels: [{url: conda-forge, used_env_vars: []}]",
        "  platforms: [linux-64]",
        "  sources: [environment.yml]",
        "package:",
    ]
    for i in reversed(range(n)):  # file order is not the dependency order
        dep = f"{{p{i - 1:06d}: '*'}}" if i else "{}"
        url = f"https://conda.anaconda.org/conda-forge/linux-64/p{i:06d}-1.0-h0_0.conda"
        rows.append(
            f"- {{name: p{i:06d}, version: '1.0', manager: conda, platform: linux-64, "
            f"dependencies: {dep}, url: '{url}', hash: {{md5: {json.dumps(md5)}, "
            f"sha256: '{'b' * 64}'}}, category: main, optional: false}}"
        )
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize(
    "field", [{"content_hash": "c\nhttps://evil.example/x.conda"}, {"md5": "a" * 31 + "\n"}]
)
def test_explicit_export_never_writes_a_newline_from_the_lock(
    field: dict, env: dict[str, str], tmp_path: Path
) -> None:
    lock = _explicit_lock(tmp_path / "conda-lock.yml", 3, **field)
    out_file = tmp_path / "explicit.txt"
    out = run_envtool(
        "export", "--lock", str(lock), "--format", "explicit", "-o", str(out_file), env=env
    )
    _one_line_error(out)
    assert not out_file.exists()


def _conda_toposort(graph: dict[str, set[str]]) -> list[str]:
    """The quadratic reference (conda's safe-mode toposort, envtool's old code)."""
    data = {k: set(v) - {k} for k, v in graph.items()}
    if "python" in data:
        data["python"].discard("pip")
    for extra in set().union(*data.values()) - set(data):
        data[extra] = set()
    order: list[str] = []
    while data:
        ready = sorted(k for k, v in data.items() if not v)
        if not ready:
            ready = [min(data.items(), key=lambda kv: (len(kv[1]), kv[0]))[0]]
        order += ready
        for name in ready:
            del data[name]
        for deps in data.values():
            deps.difference_update(ready)
    return order


def test_the_linear_toposort_orders_exactly_like_condas_and_a_50k_chain_exports(
    env: dict[str, str], tmp_path: Path
) -> None:
    from envtool.core.lockfile import _toposort_names

    rng = random.Random(10)
    for _ in range(2000):  # random graphs with cycles, self-loops, outside names, pip/python
        names = [f"p{i}" for i in range(rng.randint(1, 25))] + ["python", "pip"][
            : rng.randint(0, 2)
        ]
        pool = [*names, "__cuda", "other"]
        graph = {k: {rng.choice(pool) for _ in range(rng.randint(0, 4))} for k in names}
        assert _toposort_names(graph) == _conda_toposort(graph), graph
    # old code: 10k packages 15.8 s, 50k over 300 s (every layer rescanned every name)
    lock = _explicit_lock(tmp_path / "conda-lock.yml", 50_000)
    out = run_envtool("export", "--lock", str(lock), "--format", "explicit", env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    urls = [line for line in out.stdout.splitlines() if line.startswith("https://")]
    assert len(urls) == 50_000 and urls[0].endswith("/p000000-1.0-h0_0.conda#" + "a" * 32)
    assert urls[-1].rsplit("/", 1)[1].startswith("p049999-")


def test_a_rattler_panic_is_one_line_without_a_backtrace(
    demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """rattler 0.28 panics ('Expected just reordering', path_resolver/src/lib.rs:476) linking a
    package that ships a conda-meta record; envtool now refuses such a package before rattler
    sees it, so the check is switched off here to reach the panic and its capture."""
    from envtool.adapters.install import archive_check, installer

    record = json.loads(next((demo / "conda-meta").glob("python_abi-*.json")).read_text())
    record.update(name="x", version="1", build="0", fn="x-1-0.conda", files=[])
    record["paths_data"] = {"paths_version": 1, "paths": []}
    channel = cb.build_channel(
        tmp_path / "ch",
        [cb.Pkg("evil", "1.0", "h0_0", files={"conda-meta/x-1-0.json": json.dumps(record)})],
    )
    lock = cb.write_lock(
        tmp_path / "evil.yml", cb.solve_records(channel, ["evil"], cuda=None), channel.as_uri()
    )
    monkeypatch.setattr(
        installer, "read_archive_contents", lambda *_: archive_check.ArchiveContents({}, None)
    )
    capfd.readouterr()
    with pytest.raises(DiagnosedFailure) as err:
        install_from_lock(lock, tmp_path / "envs" / "evil", platform="linux-64", progress=False)
    assert "\n" not in err.value.message and "rattler panicked" in err.value.message, (
        err.value.message
    )
    assert "tokio" not in capfd.readouterr().err  # the backtrace did not reach the terminal


def test_tar_bz2_packages_are_validated_and_installed(env: dict[str, str], tmp_path: Path) -> None:
    """The legacy format goes through the same Python validation (info/ is read from the tar
    stream): a good one installs, one relabelled as another package is refused."""
    channel = cb.build_channel(
        tmp_path / "ch",
        [
            cb.Pkg("legacy", "1.0", "h0_0", files={"share/legacy.txt": "x\n"}, tar_bz2=True),
            cb.Pkg("other", "2.0", "h0_0", files={"share/other.txt": "y\n"}, tar_bz2=True),
        ],
    )
    lock = cb.write_lock(
        tmp_path / "l.yml", cb.solve_records(channel, ["legacy"], cuda=None), channel.as_uri()
    )
    assert read_lock(lock).packages[0].file_name.endswith(".tar.bz2")
    out = run_envtool("install", "legacy", "--lock", str(lock), env=env)
    assert out.returncode == 0, out.stderr
    other = next(channel.glob("*/other-2.0-h0_0.tar.bz2"))
    fake = tmp_path / "fake" / "legacy-1.0-h0_0.tar.bz2"
    fake.parent.mkdir()
    shutil.copy(other, fake)
    relabel = cb.edit_lock(
        lock,
        tmp_path / "r.yml",
        {
            "legacy": {
                "url": fake.as_uri(),
                "hash": {"sha256": cb.sha256_of(fake), "md5": _md5(fake)},
            }
        },
    )
    out = run_envtool("install", "legacy2", "--lock", str(relabel), env=env)
    assert "the archive is other 2.0" in _one_line_error(out)


def test_an_archive_rattler_refuses_to_unpack_is_said_to_be_the_archives_fault(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A hash-matching .tar.bz2 whose package part holds a hardlink member to a file outside
    (not in paths.json): rattler refuses it, nothing is written outside; the error said
    "failed to fetch … run the same install again", which only fails the same way."""
    import bz2
    import io
    import tarfile

    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    noarch = tmp_path / "ch" / "noarch"
    noarch.mkdir(parents=True)
    (tmp_path / "ch" / "linux-64").mkdir()
    content = b"hello\n"
    index = {"name": "slip", "version": "1.0", "build": "h0_0", "build_number": 0}
    index.update(depends=[], noarch="generic", subdir="noarch", arch=None, platform=None)
    entry = {"_path": "share/slip/ok.txt", "path_type": "hardlink", "size_in_bytes": len(content)}
    entry["sha256"] = hashlib.sha256(content).hexdigest()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in (
            ("info/index.json", json.dumps(index).encode()),
            ("info/paths.json", json.dumps({"paths_version": 1, "paths": [entry]}).encode()),
            ("share/slip/ok.txt", content),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("share/slip/hl")
        link.type, link.linkname = tarfile.LNKTYPE, str(victim)
        tar.addfile(link)
    (noarch / "slip-1.0-h0_0.tar.bz2").write_bytes(bz2.compress(raw.getvalue()))
    cb.index_channel(tmp_path / "ch")
    records = cb.solve_records(tmp_path / "ch", ["slip"], cuda=None)
    lock = cb.write_lock(tmp_path / "l.yml", records, (tmp_path / "ch").as_uri())
    for _ in range(2):
        out = run_envtool("install", "slip", "--lock", str(lock), env=env)
        line = _one_line_error(out, 1)
        assert "slip-1.0-h0_0.tar.bz2 (its bytes match the lock's sha256) could not be" in line
        assert "gets the same" in line and "failed to fetch" not in line
    assert victim.read_text() == "keep\n"


def test_a_decompression_bomb_in_the_info_part_is_refused_after_a_bounded_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The info tar is read as a stream up to a cap (1 GiB; 1 MiB here): a right-hash archive
    whose info part inflates without end costs bounded time."""
    import io
    import tarfile

    import zstandard

    from envtool.adapters.install import archive_check
    from envtool.core.lockfile import LockedPackage

    monkeypatch.setattr(archive_check, "_SCAN_LIMIT", 1 << 20)
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as tf:
        big = tarfile.TarInfo("info/aaa-padding")
        big.size = 4 << 20
        tf.addfile(big, io.BytesIO(b"\0" * big.size))
        index = json.dumps({"name": "bomb", "version": "1", "build": "0"}).encode()
        entry = tarfile.TarInfo("info/index.json")
        entry.size = len(index)
        tf.addfile(entry, io.BytesIO(index))
    archive = tmp_path / "bomb-1-0.conda"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("metadata.json", '{"conda_pkg_format_version":2}')
        zf.writestr("info-bomb-1-0.tar.zst", zstandard.ZstdCompressor().compress(tar.getvalue()))
        zf.writestr("pkg-bomb-1-0.tar.zst", zstandard.ZstdCompressor().compress(b""))
    pkg = LockedPackage("bomb", "1", "conda", "linux-64", archive.as_uri(), build="0")
    with pytest.raises(UsageError) as err:
        archive_check.read_archive_contents(archive, pkg)
    assert "no info/index.json in the first 1 MiB" in err.value.message
    monkeypatch.setattr(archive_check, "_SCAN_LIMIT", 64 << 20)
    assert archive_check.read_archive_contents(archive, pkg).index["name"] == "bomb"


def test_bundling_again_into_a_dir_with_a_planted_link_is_refused(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    bundle = tmp_path / "b"
    assert (
        run_envtool("bundle", "--lock", str(setup.lock), "-o", str(bundle), env=env).returncode == 0
    )
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(bundle / "channel" / "noarch")
    (bundle / "channel" / "noarch").symlink_to(outside)
    out = run_envtool("bundle", "--lock", str(setup.lock), "-o", str(bundle), env=env)
    assert "symbolic link" in _one_line_error(out)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("kind", ["fifo", "huge", "list"])
def test_an_install_marker_that_is_a_fifo_or_huge_does_not_hang_list_or_verify(
    kind: str, setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    assert run_envtool("install", "demo", "--lock", str(setup.lock), env=env).returncode == 0
    state = tmp_path / "envs" / "demo" / "conda-meta" / "envtool" / "state.json"
    state.unlink()
    if kind == "fifo":
        os.mkfifo(state)
    elif kind == "huge":
        with open(state, "wb") as fh:
            fh.truncate(2 << 30)  # sparse: 2 GiB of zeros
    else:
        state.write_text("[1, 2]")
    out = run_envtool("list", "--json", env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    out = run_envtool("verify", "demo", "--lock", str(setup.lock), env=env, timeout=60)
    assert out.returncode == 0, out.stderr


# ---------------------------------------------- 10. file:// archives that are not files


@pytest.mark.parametrize(
    "url",
    [
        "file:///dev/zero?python_abi-3.11-8_cp311.conda",  # the name is the query's
        "file:///dev/zero?/linux-64/python_abi-3.11-8_cp311.conda",
        "file:///dev/zero#/python_abi-3.11-8_cp311.conda",  # the name is the fragment's
        "https://example.invalid/linux-64/python_abi%3F.conda",  # '?' after decoding
        "https://example.invalid/linux-64/python_abi%23.conda",  # '#' after decoding
    ],
)
def test_a_lock_url_whose_archive_name_is_a_query_or_fragment_is_refused(
    url: str, setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """Old code: `file:///dev/zero?python_abi-….conda` passed as python_abi's archive, and the
    install copied /dev/zero into the cache up to FETCH_LIMIT (16 GiB)."""
    lock = cb.edit_lock(setup.lock, tmp_path / "q.yml", {"python_abi": {"url": url}})
    out = run_envtool("install", "demo", "--lock", str(lock), "--dry-run", env=env)
    line = _one_line_error(out)
    assert "python_abi" in line and str(lock) in line


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_file_url_archive_that_is_a_fifo_a_device_or_a_folder_is_refused_at_once(
    kind: str, setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """Old code opened file:// archives with a plain open(): a FIFO blocked the install forever
    (this test timed out), a device was read (/dev/zero up to 16 GiB into the cache). A
    symlinked channel folder still works (the last test line)."""
    good = _archive(setup, "python_abi-")
    channel = tmp_path / "ch" / "linux-64"
    channel.mkdir(parents=True)
    bad = channel / good.name
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "device":
        bad.symlink_to("/dev/null")
    else:
        bad.mkdir()
    lock = cb.edit_lock(setup.lock, tmp_path / "l.yml", {"python_abi": {"url": bad.as_uri()}})
    out = run_envtool("install", "demo", "--lock", str(lock), env=env, timeout=120)
    line = _one_line_error(out)
    assert bad.as_uri() in line and "not a package archive" in line
    assert not list((tmp_path / "envs" / "demo").glob("conda-meta/*.json"))

    # a channel reached through a symlinked folder, its archive a symlink: still installs
    real = tmp_path / "real"
    real.mkdir()
    (real / good.name).symlink_to(good)
    (tmp_path / "linked").symlink_to(real)
    url = (tmp_path / "linked" / good.name).as_uri()
    lock = cb.edit_lock(setup.lock, tmp_path / "ok.yml", {"python_abi": {"url": url}})
    out = run_envtool("install", "demo", "--lock", str(lock), env=env, timeout=300)
    assert out.returncode == 0, out.stderr


# ------------------------------------- 11. rattler's cache entry: a link, or out of the cache


def test_a_cache_entry_that_is_a_symlink_is_removed_not_followed_and_extracted_again(
    setup: cb.CudaSetup, demo: Path, cache: Path, tmp_path: Path
) -> None:
    """Old code skipped the check of an entry that is a link, and rattler linked from wherever
    it pointed: the changed file below went into every new env, and no reinstall repaired it."""
    entry = next(p for p in (cache / "rattler").glob("libtorch-*") if p.is_dir())
    original = (entry / "lib" / "libtorch_cuda.so").read_bytes()
    outside = tmp_path / "outside"
    shutil.copytree(entry, outside, symlinks=True)
    (outside / "lib" / "libtorch_cuda.so").write_bytes(b"changed outside the cache\n")
    shutil.rmtree(entry)
    entry.symlink_to(outside, target_is_directory=True)

    other = tmp_path / "envs" / "other"
    install_from_lock(setup.lock, other, platform="linux-64", progress=False)
    assert (other / "lib" / "libtorch_cuda.so").read_bytes() == original
    assert not entry.is_symlink() and (entry / "lib" / "libtorch_cuda.so").read_bytes() == original
    # the link was removed, never followed: what it pointed to is as it was
    assert (outside / "lib" / "libtorch_cuda.so").read_bytes() == b"changed outside the cache\n"
    assert compute_drift(other, setup.lock, "linux-64", check_files=True, full=True)["clean"]


def test_a_shared_cache_entry_swapped_for_a_link_after_it_was_verified_is_refused(
    setup: cb.CudaSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No archive to extract again (the entry was used without one): one refusal, nothing linked
    from the link; the next install downloads the archive and extracts it again."""
    from envtool.adapters.install import installer

    monkeypatch.delenv("ENVTOOL_CACHE_DIR", raising=False)
    monkeypatch.delenv("RATTLER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    install_from_lock(setup.lock, tmp_path / "first", platform="linux-64", progress=False)
    shutil.rmtree(tmp_path / "xdg" / "envtool" / "archives")  # only rattler's entries are left
    shared = tmp_path / "xdg" / "rattler" / "cache" / "pkgs"
    entry = next(p for p in shared.glob("libtorch-*") if p.is_dir())
    original = (entry / "lib" / "libtorch_cuda.so").read_bytes()
    outside = tmp_path / "outside"

    def swap(point: str) -> None:
        if point == "after-download":
            shutil.copytree(entry, outside, symlinks=True)
            (outside / "lib" / "libtorch_cuda.so").write_bytes(b"changed outside the cache\n")
            shutil.rmtree(entry)
            entry.symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(installer, "_pause_hook", swap)
    second = tmp_path / "second"
    with pytest.raises(DiagnosedFailure) as err:
        install_from_lock(setup.lock, second, platform="linux-64", progress=False)
    assert "libtorch" in err.value.message and "symbolic link" in err.value.message
    assert not (second / "lib" / "libtorch_cuda.so").exists()

    monkeypatch.setattr(installer, "_pause_hook", lambda point: None)
    report = install_from_lock(setup.lock, second, platform="linux-64", progress=False)
    assert [n.split("-")[0] for n in report.fetched] == ["libtorch"]
    assert (second / "lib" / "libtorch_cuda.so").read_bytes() == original
    assert not entry.is_symlink()
    assert (outside / "lib" / "libtorch_cuda.so").read_bytes() == b"changed outside the cache\n"


@pytest.mark.parametrize("kind", ["softlink", "file"])
def test_a_package_that_ships_conda_meta_itself_is_refused(
    kind: str, env: dict[str, str], tmp_path: Path
) -> None:
    """Old code refused `conda-meta/…` but not the path `conda-meta`: a link (or a file) of that
    name passed, then rattler failed and left the env incomplete, on every later try too."""
    pkg = cb.Pkg("evil", "1.0", "h0_0", files={"share/evil/README": "x\n"})
    if kind == "softlink":
        pkg.symlinks = {"conda-meta": "share/evil"}
    else:
        pkg.files["conda-meta"] = "not a folder\n"
    channel = cb.build_channel(tmp_path / "evil-channel", [pkg])
    lock = cb.write_lock(
        tmp_path / "evil.yml", cb.solve_records(channel, ["evil"], cuda=None), channel.as_uri()
    )
    line = _one_line_error(run_envtool("install", "evil", "--lock", str(lock), env=env))
    assert "'conda-meta'" in line and "evil 1.0" in line
    assert not (tmp_path / "envs" / "evil" / "conda-meta" / "envtool" / "incomplete.json").exists()


# ------------------------------------------------ 12. softlinks in rattler's extracted cache


def _retarget(link: Path, target: str) -> None:
    link.unlink()
    link.symlink_to(target)


def test_a_softlink_retargeted_in_the_extracted_cache_is_not_linked(
    setup: cb.CudaSetup, demo: Path, cache: Path, tmp_path: Path
) -> None:
    """Old code only checked that a softlink of paths.json existed: the cache's bin/python3,
    retargeted at a file outside, went into every new env, and verify said clean."""
    entry = next(p for p in (cache / "rattler").glob("python-*") if p.is_dir())
    _retarget(entry / "bin" / "python3", str(tmp_path / "ATTACKER"))
    other = tmp_path / "envs" / "other"
    install_from_lock(setup.lock, other, platform="linux-64", progress=False)
    assert os.readlink(other / "bin" / "python3") == "python"  # the archive's own target
    assert os.readlink(entry / "bin" / "python3") == "python"  # extracted again
    assert compute_drift(other, setup.lock, "linux-64", check_files=True)["clean"]


def test_verify_reports_a_retargeted_softlink_and_install_repairs_it(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    assert run_envtool("install", "demo", "--lock", str(setup.lock), env=env).returncode == 0
    link = tmp_path / "envs" / "demo" / "bin" / "python3"
    _retarget(link, "/etc/ATTACKER")
    out = run_envtool("verify", "demo", env=env)
    assert out.returncode == 1 and "damaged  python: 1 file changed" in out.stdout, out.stdout
    assert run_envtool("install", "demo", "--lock", str(setup.lock), env=env).returncode == 0
    assert os.readlink(link) == "python"
    assert run_envtool("verify", "demo", env=env).returncode == 0


@pytest.mark.parametrize("target", ["/etc/ATTACKER", "../../../../etc/ATTACKER"])
def test_a_shared_cache_entry_whose_softlink_leaves_the_prefix_is_downloaded(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no archive to compare with, a softlink must stay in the prefix: this entry is not
    used, its archive is downloaded and extracted again (old code linked the link as it was)."""
    pkg = cb.Pkg(
        "linky",
        "1.0",
        "h0_0",
        files={"lib/liblinky.so.1": "library\n"},
        symlinks={"lib/liblinky.so": "liblinky.so.1"},
    )
    channel = cb.build_channel(tmp_path / "ch", [pkg])
    lock = cb.write_lock(
        tmp_path / "l.yml", cb.solve_records(channel, ["linky"], cuda=None), channel.as_uri()
    )
    monkeypatch.delenv("ENVTOOL_CACHE_DIR", raising=False)
    monkeypatch.delenv("RATTLER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    install_from_lock(lock, tmp_path / "first", platform="linux-64", progress=False)
    shutil.rmtree(tmp_path / "xdg" / "envtool" / "archives")  # only rattler's entries are left
    entry = next((tmp_path / "xdg" / "rattler" / "cache" / "pkgs").glob("linky-*/"))

    report = install_from_lock(lock, tmp_path / "untouched", platform="linux-64", progress=False)
    assert report.from_package_cache and not report.fetched  # a relative link in the prefix: used

    shutil.rmtree(tmp_path / "xdg" / "envtool" / "archives")
    _retarget(entry / "lib" / "liblinky.so", target)
    second = tmp_path / "second"
    report = install_from_lock(lock, second, platform="linux-64", progress=False)
    assert report.fetched and not report.from_package_cache
    assert os.readlink(second / "lib" / "liblinky.so") == "liblinky.so.1"


# --------------------------------- 13. rattler's shared cache without the archive: whose is it


def _shared_cache_only(
    setup: cb.CudaSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """rattler's shared cache (as pixi leaves it) filled by a first install; envtool's archives
    removed, so the next install can only use the extracted entries or download."""
    monkeypatch.delenv("ENVTOOL_CACHE_DIR", raising=False)
    monkeypatch.delenv("RATTLER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    install_from_lock(setup.lock, tmp_path / "first", platform="linux-64", progress=False)
    shutil.rmtree(tmp_path / "xdg" / "envtool" / "archives")
    return tmp_path / "xdg" / "rattler" / "cache" / "pkgs"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("how", ["another-owner", "group-writable"])
def test_a_shared_entry_changed_with_its_paths_json_by_another_user_is_not_used(
    how: str, setup: cb.CudaSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the archive, the entry's own paths.json is the reference: a file and its sha256
    there changed together passed (old code linked the changed file). Only the user's own entry
    is trusted that far; another user's (or a file others may write) is downloaded instead."""
    shared = _shared_cache_only(setup, tmp_path, monkeypatch)
    entry = next(p for p in shared.glob("libtorch-*") if p.is_dir())
    lib = entry / "lib" / "libtorch_cuda.so"
    original = lib.read_bytes()
    evil = b"changed with its paths.json\n"
    paths_json = entry / "info" / "paths.json"
    data = json.loads(paths_json.read_text())
    for item in data["paths"]:
        if item["_path"] == "lib/libtorch_cuda.so":
            item.update(sha256=hashlib.sha256(evil).hexdigest(), size_in_bytes=len(evil))
    for path, text in ((lib, evil), (paths_json, json.dumps(data).encode())):
        path.unlink()  # a new file, as another user would leave it in a group-writable folder
        path.write_bytes(text)
        if how == "another-owner":
            os.chown(path, 65534, 65534)
        else:
            path.chmod(0o664)

    second = tmp_path / "second"
    report = install_from_lock(setup.lock, second, platform="linux-64", progress=False)
    # (the python stub's bin/python is an absolute link: never used without its archive)
    assert [n.split("-")[0] for n in report.fetched] == ["libtorch", "python"]
    assert (second / "lib" / "libtorch_cuda.so").read_bytes() == original


@pytest.mark.parametrize("how", ["read-once", "streamed", "in-worker-threads"])
def test_a_relabelled_archive_already_in_the_cache_is_refused_in_the_single_pass(
    setup: cb.CudaSetup,
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    """A cached archive is hashed and validated in one pass (read_if_matches, then info/ from
    the same bytes); one that has the lock's hash but is another package is still refused
    before anything is linked — read once (small) or streamed (over ONE_READ) alike, checked
    in the calling thread (small) or in fetch_all's worker threads (over THREAD_MIN) alike."""
    from envtool.adapters.install import archive_check, fetch

    if how == "streamed":
        monkeypatch.setattr(archive_check, "ONE_READ", 0)
    if how == "in-worker-threads":
        monkeypatch.setattr(fetch, "THREAD_MIN", 0)
    other = _archive(setup, "cuda-version-")
    lock = cb.edit_lock(
        setup.lock,
        tmp_path / "relabel.yml",
        {"python_abi": {"hash": {"sha256": cb.sha256_of(other), "md5": _md5(other)}}},
    )
    (cache / "archives").mkdir(parents=True)
    shutil.copy(other, cache / "archives" / "python_abi-3.11-8_cp311.conda")
    prefix = tmp_path / "envs" / "demo"
    with pytest.raises(UsageError) as err:
        install_from_lock(lock, prefix, platform="linux-64", progress=False)
    assert (
        "python_abi" in err.value.message
        and "the archive is cuda-version 12.6" in err.value.message
    )
    assert "nothing was linked" in err.value.message
    assert not prefix.exists() or not list(prefix.glob("conda-meta/*.json"))
    assert not (prefix / "conda-meta" / "envtool" / "incomplete.json").exists()
    # the same archive under its own name and hash installs: the pass does not refuse good ones
    install_from_lock(setup.lock, prefix, platform="linux-64", progress=False)
    assert list(prefix.glob("conda-meta/python_abi-*.json"))
