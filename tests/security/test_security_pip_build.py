"""The pip part never runs code that came in as data: an sdist's build backend, a VCS checkout, an
editable project, a requirements file pulled in with `-r` (uv expands `${VAR}` in it), a uv.toml
in the folder envtool runs from. Each attack is real: a source distribution whose in-tree build
backend writes a marker file when uv imports it, a real `uv pip compile`/`install`, a real
envtool subprocess; the marker must never appear and nothing may land outside the prefix."""

from __future__ import annotations

import hashlib
import http.server
import io
import tarfile
import threading
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool

from envtool.adapters.install.uv_pip import compile_pip
from envtool.core.lockfile import SolvedPackage
from envtool.core.spec import parse_pip_line, pip_lock_problem
from envtool.errors import UsageError

CONDA = [SolvedPackage("python", "3.11.9", "h_0", "linux-64", "https://x/python.conda")]


def hostile_sdist(dest: Path, marker: Path, name: str = "evilpkg") -> Path:
    """An sdist whose PEP 517 backend lives in the tree (no network needed to build it) and
    writes `marker` the moment a frontend imports it."""
    backend = (
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('built')\n"
        "def get_requires_for_build_wheel(config_settings=None): return []\n"
        "def prepare_metadata_for_build_wheel(d, config_settings=None): raise SystemExit(1)\n"
        "def build_wheel(d, config_settings=None, metadata_directory=None): raise SystemExit(1)\n"
        "def build_sdist(d, config_settings=None): raise SystemExit(1)\n"
    )
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        'backend-path = ["."]\n',
        "backend.py": backend,
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
    }
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{name}-0.1.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in files.items():
            info = tarfile.TarInfo(f"{name}-0.1/{rel}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


@pytest.mark.parametrize(
    ("entry", "refused"),
    [
        ("-e .", "editable"),
        ("--editable=./src", "editable"),
        ("-r requirements.txt", "reads another file"),
        ("-c https://example.org/constraints.txt", "reads another file"),
        ("--trusted-host example.org", "--trusted-host"),
        ("git+https://github.com/NVIDIA/dllogger.git", "VCS"),
        ("dllogger @ git+https://user@github.com/NVIDIA/dllogger.git", "VCS"),
        ("x @ https://example.org/x-1.0.tar.gz", "source"),
        ("https://example.org/x-1.0-py3-none-any.whl#sha256=00", None),
        ("x[extra] @ file:///w/x-1.0-py3-none-any.whl ; python_version > '3'", None),
        ("./dist/x-1.0-py3-none-any.whl", None),
        (".", "source"),
        ("torch==2.7.1", None),
        ("--extra-index-url https://download.pytorch.org/whl/cu126", None),
        ("--no-index", None),
    ],
)
def test_which_pip_entries_a_lock_refuses(entry: str, refused: str | None) -> None:
    problem = pip_lock_problem(parse_pip_line(entry))
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and refused in problem[0] and problem[1]


@pytest.mark.integration
def test_an_sdist_only_package_is_not_built_at_lock_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    marker = tmp_path / "PWNED"
    links = tmp_path / "links"
    hostile_sdist(links, marker)
    with pytest.raises(UsageError):
        compile_pip(["--no-index", f"--find-links {links}", "evilpkg"], CONDA, "linux-64")
    assert not marker.exists()


@pytest.mark.integration
def test_entries_that_build_or_read_files_are_refused_before_uv_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("LEAKME", "ghp_secret")
    marker = tmp_path / "PWNED"
    sdist = hostile_sdist(tmp_path / "src", marker)
    tree = tmp_path / "tree"
    with tarfile.open(sdist) as tar:
        tar.extractall(tree, filter="data")
    seen: list[str] = []

    class Record(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = b"leak @ http://127.0.0.1/${LEAKME}.tar.gz\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Record)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/reqs.txt"
    try:
        for entry in (
            f"evilpkg @ {sdist.as_uri()}",
            f"-e {tree / 'evilpkg-0.1'}",
            str(tree / "evilpkg-0.1"),
            f"-r {url}",
            f"-c {url}",
        ):
            with pytest.raises(UsageError) as err:
                compile_pip(["--no-index", entry], CONDA, "linux-64")
            assert "wheels only" in err.value.message
            assert "ghp_secret" not in err.value.message
    finally:
        server.shutdown()
    assert seen == [] and not marker.exists()


@pytest.mark.integration
def test_a_lock_with_a_pip_sdist_is_refused_and_nothing_builds(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "PWNED"
    sdist = hostile_sdist(tmp_path / "wheels", marker)
    edit = {
        "name": "evilpkg",
        "version": "0.1",
        "url": sdist.as_uri(),
        "hash": {"sha256": hashlib.sha256(sdist.read_bytes()).hexdigest()},
    }
    lock = cb.edit_lock(setup.lock, tmp_path / "sdist.yml", {"envtool-demo": edit})
    out = run_envtool("install", "demo", "--lock", str(lock), env=env)
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("envtool: error:")]
    assert len(errors) == 1 and "source distribution" in errors[0], out.stderr
    assert "Traceback" not in out.stderr
    assert not marker.exists()
    assert not (tmp_path / "envs" / "demo").exists()


@pytest.mark.integration
def test_a_uv_toml_in_the_working_folder_does_not_move_the_pip_install(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """A cloned repo's uv.toml (or pyproject's [tool.uv.pip]) that sets `target`: uv would put
    the wheel there, outside the prefix, and the install would still report success."""
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    (repo / "uv.toml").write_text(f'[pip]\ntarget = "{outside}"\n')
    (repo / "pyproject.toml").write_text(f'[tool.uv.pip]\ntarget = "{outside}"\n')
    out = run_envtool("install", "demo", "--lock", str(setup.lock), env=env, cwd=repo)
    assert out.returncode == 0, out.stderr
    assert not outside.exists()
    prefix = tmp_path / "envs" / "demo"
    assert list(prefix.glob("lib/python3*/site-packages/envtool_demo/__init__.py"))
    assert run_envtool("verify", "demo", env=env, cwd=repo).returncode == 0
