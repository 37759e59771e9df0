"""Untrusted input (issue 10): env files, recordings, external programs, names and paths that
must end in one line and exit 2 (or a reported fact), never a hang, a traceback or runaway memory.

Each test here failed on the code before issue 10's fixes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from solve_scenarios import H200

# ----------------------------------------------------------------------------- env files


def _env_file_cases(tmp: Path) -> dict[str, Path]:
    """Hostile environment files: devices, FIFOs, alias bombs, huge files, deep nesting, huge
    versions. Each must be refused with one line naming it."""
    cases: dict[str, Path] = {"dev-zero": Path("/dev/zero")}
    fifo = tmp / "fifo.yml"
    os.mkfifo(fifo)
    cases["fifo"] = fifo
    laughs = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        laughs.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    laughs.append("dependencies: [*i]")
    (tmp / "laughs.yml").write_text("\n".join(laughs) + "\n")
    cases["billion-laughs"] = tmp / "laughs.yml"
    (tmp / "alias-small.yml").write_text("x: &p [python]\ndependencies: *p\n")
    cases["alias"] = tmp / "alias-small.yml"
    (tmp / "big.yml").write_text("dependencies:\n" + "  - numpy\n" * (5 * 1024 * 1024 // 10))
    cases["too-large"] = tmp / "big.yml"
    (tmp / "deep.yml").write_text("[" * 200_000 + "\n")
    cases["200k-nested-flow"] = tmp / "deep.yml"
    (tmp / "deep-ok.yml").write_text("dependencies: " + "[" * 100 + "]" * 100 + "\n")
    cases["100-nested-closed"] = tmp / "deep-ok.yml"
    (tmp / "dup.yml").write_text("dependencies: [python]\ndependencies: [numpy]\n")
    cases["duplicate-key"] = tmp / "dup.yml"
    (tmp / "ver5000.yml").write_text("dependencies:\n  - cuda-version=12." + "9" * 5000 + "\n")
    cases["5000-digit-cuda"] = tmp / "ver5000.yml"
    (tmp / "ver100.yml").write_text("dependencies:\n  - pytorch=2." + "9" * 100 + "\n")
    cases["100-digit-torch"] = tmp / "ver100.yml"
    (tmp / "pipver.yml").write_text("dependencies:\n  - pip:\n    - torch==2." + "9" * 5000 + "\n")
    cases["5000-digit-pip"] = tmp / "pipver.yml"
    (tmp / "pipver100.yml").write_text(
        "dependencies:\n  - pip:\n    - torch==2." + "9" * 100 + "\n"
    )
    cases["100-digit-pip"] = tmp / "pipver100.yml"
    (tmp / "longline.yml").write_text("dependencies:\n  - [" + "x" * 3_000_000 + "]\n")
    cases["3MB-value-echoed"] = tmp / "longline.yml"
    (tmp / "dir.yml").mkdir()
    cases["directory"] = tmp / "dir.yml"
    (tmp / "utf16.yml").write_bytes("dependencies: [python]\n".encode("utf-16"))
    cases["utf-16"] = tmp / "utf16.yml"
    return cases


ENV_FILE_CASES = [
    "dev-zero",
    "fifo",
    "billion-laughs",
    "alias",
    "too-large",
    "200k-nested-flow",
    "100-nested-closed",
    "duplicate-key",
    "5000-digit-cuda",
    "100-digit-torch",
    "5000-digit-pip",
    "100-digit-pip",
    "3MB-value-echoed",
    "directory",
    "utf-16",
]


def _one_line_error(code: int, out: str, err: str, name: str) -> None:
    assert code == 2, (code, out[-500:], err[-500:])
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("envtool: error:"), err[-500:]
    assert len(lines[0]) < 600, lines[0][:600]  # the value is cut, not echoed in full
    assert name in lines[0]


@pytest.mark.parametrize("case", ENV_FILE_CASES)
def test_inspect_refuses_a_hostile_env_file_in_one_line(case, run_cli, tmp_path) -> None:
    path = _env_file_cases(tmp_path)[case]
    code, out, err = run_cli(["inspect", str(path)], tmp_path)
    _one_line_error(code, out, err, path.name)


@pytest.mark.parametrize("case", ENV_FILE_CASES)
def test_create_f_refuses_a_hostile_env_file_in_one_line(case, run_cli, tmp_path) -> None:
    path = _env_file_cases(tmp_path)[case]
    args = ["create", "x", "--no-install", "--cuda", "12.6", "-f", str(path), *H200]
    code, out, err = run_cli(args, tmp_path)
    if case == "directory":  # click's own usage error for -f DIR (exit 2, no traceback)
        assert code == 2 and "is a directory" in err and "Traceback" not in err
    else:
        _one_line_error(code, out, err, path.name)
    assert not (tmp_path / "environments").exists()


def test_lock_refuses_a_fifo_environment_yml(run_cli, tmp_path) -> None:
    env_dir = tmp_path / "environments" / "x"
    env_dir.mkdir(parents=True)
    os.mkfifo(env_dir / "environment.yml")
    code, out, err = run_cli(["lock", "x"], tmp_path)
    _one_line_error(code, out, err, "environment.yml")


# ------------------------------------------------------------------- version limits in -f


@pytest.fixture(scope="module")
def conda_forge(harvested) -> str:
    return str(harvested / "conda-forge")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("pytorch>=2.8", "pytorch >=2.8"),  # the fixture channel has no 2.8 for CUDA 12.6
        ("pytorch<2", "pytorch <2"),
        ("cuda-version>=12.8", "cuda-version >=12.8"),
    ],
)
def test_a_version_limit_in_the_file_is_kept_in_the_solve(
    spec, why, conda_forge, run_cli, tmp_path
) -> None:
    """`create --cuda 12.6 -f` used to exit 0 with pytorch 2.7.1 locked, the limit dropped."""
    (tmp_path / "env.yml").write_text(f'name: x\ndependencies:\n  - python\n  - "{spec}"\n')
    args = ["create", "x", "--no-install", "--cuda", "12.6", "-f", "env.yml"]
    code, out, err = run_cli([*args, "--channel", conda_forge, *H200], tmp_path)
    assert code == 2, out
    assert "no solution for linux-64" in err and why in err
    assert "Traceback" not in err
    assert not (tmp_path / "environments" / "x" / "conda-lock.yml").exists()


@pytest.mark.integration
def test_a_satisfiable_limit_is_honoured_and_kept_for_relock(
    conda_forge, run_cli, tmp_path
) -> None:
    (tmp_path / "env.yml").write_text('name: x\ndependencies:\n  - python\n  - "pytorch<2.7"\n')
    args = ["create", "x", "--no-install", "--cuda", "12.6", "-f", "env.yml"]
    code, out, err = run_cli([*args, "--channel", conda_forge, *H200], tmp_path)
    assert code == 0, err
    lock = (tmp_path / "environments" / "x" / "conda-lock.yml").read_text()
    version = lock.split("- name: pytorch\n  version: ", 1)[1].split("\n", 1)[0]
    assert version.startswith(("2.5", "2.6")), version
    # the written request keeps the limit, so a re-lock solves the same request: up to date
    assert "pytorch<2.7" in (tmp_path / "environments" / "x" / "environment.yml").read_text()
    code, out, err = run_cli(["lock", "x", "--check"], tmp_path)
    assert code == 0, err


@pytest.mark.parametrize(
    "spec", ["pytorch=>>2", "numpy >>1", "pytorch >=2,<", "cuda-version ~=", "pytorch==2..1"]
)
def test_an_unparseable_spec_in_the_file_exits_2_naming_it(spec, run_cli, tmp_path) -> None:
    (tmp_path / "env.yml").write_text(f'name: x\ndependencies:\n  - python\n  - "{spec}"\n')
    args = ["create", "x", "--no-install", "--cuda", "12.6", "-f", "env.yml", *H200]
    code, out, err = run_cli(args, tmp_path)
    _one_line_error(code, out, err, "env.yml")
    assert repr(spec) in err
    assert not (tmp_path / "environments").exists()


# ------------------------------------------------------------------- doctor --replay corpus

WRONG_VALUES: list[object] = [[], {}, "x", 7, None, True, 1.5, "9" * 100_000, [{"a": []}]]


def _rich_env() -> dict:
    return {
        "python_exe": "/envs/x/bin/python",
        "prefix": "/envs/x",
        "name": "x",
        "status": "ok",
        "error": None,
        "python_version": "3.11.9",
        "torch": {
            "version": "2.5.1+cu121",
            "cuda": "12.1",
            "cudnn": 90100,
            "nccl": "2.21.5",
            "is_available": True,
            "available_message": None,
            "device_count": 2,
            "arch_list": ["sm_80", "sm_90"],
            "capabilities": ["9.0", "9.0"],
            "path": "/envs/x/lib/python3.11/site-packages/torch/__init__.py",
        },
        "torch_import_error": None,
        "conda_packages": {
            "cuda-version": {"version": "12.1", "build": "h1d6eff3_3", "channel": "conda-forge"},
            "pytorch": {"version": "2.5.1", "build": "cuda121_py311", "channel": "conda-forge"},
        },
        "pip_torch": [{"name": "torch", "version": "2.5.1", "installer": "conda", "location": "x"}],
        "install_state": "complete",
        "drift": {"missing": [], "extra": [], "changed": []},
    }


def _nvml() -> dict:
    dev = {
        "index": 0,
        "name": "NVIDIA H200",
        "capability": [9, 0],
        "memory_total": 150_000_000_000,
        "uuid": "GPU-1",
        "bus_id": "00000000:18:00.0",
        "mig_current": 0,
        "mig_devices": 0,
        "nvlink_active": 18,
    }
    return {
        "driver_version": "580.65.06",
        "cuda_driver_version": 13000,
        "devices": [dev, {**dev, "index": 1, "uuid": "GPU-2"}],
        "error": None,
    }


def _deep() -> dict:
    row = {"device": "cuda:0", "dtype": "bfloat16", "rel_error": 0.001, "tolerance": 0.01}
    row |= {"ok": True, "name": "NVIDIA H200", "tflops": 700.5}
    size = {"size_mib": 64, "exact": True, "time_us": 300.0, "algbw_gbps": 200.0}
    size["busbw_gbps"] = 200.0
    return {
        "matmul": {"torch": "2.5.1", "cuda": "12.1", "device_count": 2, "size": 4096},
        "allreduce": {"world_size": 2, "backend": "nccl", "nccl": "2.21.5", "sum_exact": True},
        "skipped": None,
    } | {"_rows": (row, size)}


def _write_json(path: Path, data: object) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _base_recordings(tmp: Path, fixtures_root: Path | None) -> dict[str, Path]:
    """Real recordings: this host's (--record), the H200 capture (raw nvidia-smi outputs) when
    the fixtures are here, and an NVML + --deep recording and a host.json-only one."""
    from conftest import H200_CAPTURE, FakeHost

    from envtool.cli import main

    recs: dict[str, Path] = {}
    live = tmp / "live"
    with pytest.raises(SystemExit):
        main(["doctor", "--fast", "--record", str(live)])
    recs["live"] = live
    if fixtures_root is not None and (fixtures_root / H200_CAPTURE).is_dir():
        h200 = FakeHost(fixtures_root / H200_CAPTURE).record(tmp / "h200")
        _write_json(h200 / "env.json", _rich_env())
        recs["h200"] = h200
    nvml = tmp / "nvml"
    _write_json(nvml / "host" / "nvml.json", _nvml())
    _write_json(nvml / "host" / "fs.json", {"shm_bytes": 1 << 30, "cuda_home": None})
    (nvml / "host" / "fs.json").write_text(
        '{"shm_bytes": 1073741824, "cuda_home": "/usr/local/cuda", "ld_library_hits": ["/x"]}'
    )
    _write_json(nvml / "host" / "probe.json", {"errors": ["nvidia-smi: not found on PATH"]})
    _write_json(nvml / "host" / "env.json", {"CUDA_VISIBLE_DEVICES": "0,1"})
    (nvml / "host" / "nvcc-version.txt").write_text(
        "Cuda compilation tools, release 12.1, V12.1.105\n"
    )
    _write_json(nvml / "env.json", _rich_env())
    deep = _deep()
    row, size = deep.pop("_rows")
    deep["matmul"]["results"] = [row, {**row, "dtype": "float32"}]
    deep["allreduce"]["sizes"] = [size, {**size, "size_mib": 256}]
    _write_json(nvml / "deep.json", deep)
    recs["nvml+deep"] = nvml
    host_only = tmp / "hostjson"
    _write_json(host_only / "env.json", _rich_env())
    import json

    from envtool.core.host_record import facts_from_record

    host = facts_from_record({"nvml.json": json.dumps(_nvml())}).to_dict()
    host |= {"topology": "GPU0 X NV18", "overrides": {"CONDA_OVERRIDE_CUDA": "12.4"}}
    host |= {"probe_errors": ["x"], "ld_library_hits": ["/x/libcudart.so"]}
    _write_json(host_only / "host.json", host)
    recs["host.json"] = host_only
    return recs


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON value: the root, each key of each object, each list item."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _replaced(value: object, path: tuple, new: object) -> object:
    if not path:
        return new
    copy = value.copy() if isinstance(value, (dict, list)) else value
    copy[path[0]] = _replaced(copy[path[0]], path[1:], new)  # type: ignore[index]
    return copy


def _run_main(args: list[str], capsys) -> tuple[int, str, str]:
    from envtool.cli import main

    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_replay_corpus_of_wrong_types_never_gives_a_traceback(tmp_path, capsys, request) -> None:
    """Every field of every JSON file of real recordings replaced by a list, an object, a
    string, an int, null, a bool, a float, a 100k-character string, a nested list: each replay
    exits 0/1 (the value is legitimately optional or harmless) or 2 with one line naming the
    file — never a traceback (~55 such fields were TypeErrors/KeyErrors)."""
    import json
    import shutil

    from conftest import fixtures_dir

    root = fixtures_dir()
    recs = _base_recordings(tmp_path / "base", root if root.is_dir() else None)
    capsys.readouterr()  # the recording command's own output (its target line) is not a case's
    tried = handled = refused = 0
    failures: list[str] = []
    work = tmp_path / "case"
    for label, rec in recs.items():
        for file in sorted(p for p in rec.rglob("*.json")):
            rel = file.relative_to(rec)
            original = json.loads(file.read_text())
            for path in _paths(original):
                for new in WRONG_VALUES:
                    if path == () and new in ({}, None):
                        continue  # the empty object is a legitimate (old) record
                    tried += 1
                    shutil.rmtree(work, ignore_errors=True)
                    shutil.copytree(rec, work)
                    (work / rel).write_text(json.dumps(_replaced(original, path, new)))
                    what = f"{label}/{rel} {list(path)} = {str(new)[:20]}"
                    mode = ["--json"] if tried % 2 else ["--verbose"]
                    try:
                        code, out, err = _run_main(["doctor", "--replay", str(work), *mode], capsys)
                    except BaseException as exc:  # noqa: BLE001 - the escape is the finding
                        failures.append(f"{what}: {type(exc).__name__}: {exc}"[:300])
                        continue
                    lines = [x for x in err.splitlines() if x.strip()]
                    if code in (0, 1) and out.strip():
                        handled += 1
                    elif code == 2 and len(lines) == 1 and str(rel.name) in lines[0]:
                        handled += 1
                        refused += 1
                    else:
                        failures.append(f"{what}: exit {code}: {err[-300:]}")
    print(f"replay corpus: {tried} tried, {handled} handled ({refused} refused with one line)")
    request.node.user_properties.append(("replay_corpus", (tried, handled, refused)))
    assert tried > 500
    assert not failures, f"{len(failures)} of {tried}:\n" + "\n".join(failures[:40])


def _h200_or_nvml(tmp: Path) -> Path:
    from conftest import fixtures_dir

    root = fixtures_dir()
    recs = _base_recordings(tmp / "base", root if root.is_dir() else None)
    return recs.get("h200") or recs["nvml+deep"]


def _replay_one_line_or_verdict(rec: Path, capsys, must_refuse: bool = False) -> tuple[int, str]:
    code, out, err = _run_main(["doctor", "--replay", str(rec), "--verbose"], capsys)
    lines = [x for x in err.splitlines() if x.strip()]
    if must_refuse or code == 2:
        assert code == 2 and len(lines) == 1 and lines[0].startswith("envtool: error:"), err
        assert len(lines[0]) < 1000
    else:
        assert code in (0, 1) and out.strip(), (code, err)
    return code, out + err


SECRET = "TOP-SECRET-KEY-MATERIAL"


@pytest.mark.parametrize(
    "where", ["env.json", "host.json", "deep.json", "host/nvidia-smi.txt", "host/nvml.json"]
)
def test_replay_never_follows_a_symlink_in_the_recording(where, tmp_path, capsys) -> None:
    """A recording whose file is a link to the victim's secret: refused, the secret unprinted."""
    rec = tmp_path / "rec"
    _write_json(rec / "env.json", _rich_env())
    _write_json(rec / "host" / "nvml.json", _nvml())
    (rec / "host" / "nvidia-smi.txt").write_text("x")
    _write_json(rec / "host.json", {})
    _write_json(rec / "deep.json", {"matmul": None, "allreduce": None, "skipped": "x"})
    secret = tmp_path / "id_rsa"
    secret.write_text(f'{{"driver_version": "{SECRET}"}}\n{SECRET}\n')
    if where == "host.json":
        import shutil

        shutil.rmtree(rec / "host")  # host.json is read only without raw outputs
    (rec / where).unlink()
    (rec / where).symlink_to(secret)
    code, text = _replay_one_line_or_verdict(rec, capsys, must_refuse=True)
    assert "symbolic link" in text and SECRET not in text


def test_replay_refuses_a_host_dir_that_is_a_symlink(tmp_path, capsys) -> None:
    rec = tmp_path / "rec"
    _write_json(rec / "env.json", _rich_env())
    elsewhere = tmp_path / "elsewhere"
    _write_json(elsewhere / "nvml.json", _nvml())
    (rec / "host").symlink_to(elsewhere)
    _, text = _replay_one_line_or_verdict(rec, capsys, must_refuse=True)
    assert "symbolic link" in text


def _bad_recording_file(case: str, rec: Path) -> None:
    host = rec / "host"
    if case == "fifo-nvml":
        (host / "nvml.json").unlink()
        os.mkfifo(host / "nvml.json")
    elif case == "fifo-env":
        (rec / "env.json").unlink()
        os.mkfifo(rec / "env.json")
    elif case == "deep-json-env":
        (rec / "env.json").write_text("[" * 100_000 + "]" * 100_000)
    elif case == "deep-json-probe":
        (host / "probe.json").write_text('{"errors": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif case == "huge-nvml":
        (host / "nvml.json").write_text('{"error": "' + "x" * (20 << 20) + '"}')
    elif case == "duplicate-key-env":
        (rec / "env.json").write_text('{"status": "ok", "status": "crashed"}')
    elif case == "env-not-utf8":
        (rec / "env.json").write_bytes(b'{"name": "\xff\xfe"}')
    elif case == "nan-shm":
        (host / "fs.json").write_text('{"shm_bytes": NaN}')
    elif case == "driver-override-5000-digits":
        _write_json(host / "env.json", {"ENVTOOL_DRIVER_VERSION": "5" * 5000})


BAD_RECORDING_FILES = [
    "fifo-nvml",
    "fifo-env",
    "deep-json-env",
    "deep-json-probe",
    "huge-nvml",
    "duplicate-key-env",
    "env-not-utf8",
    "nan-shm",
    "driver-override-5000-digits",
]


@pytest.mark.parametrize("case", BAD_RECORDING_FILES)
def test_replay_of_a_hostile_recording_file_is_one_line(case, tmp_path, capsys) -> None:
    rec = tmp_path / "rec"
    _write_json(rec / "env.json", _rich_env())
    _write_json(rec / "host" / "nvml.json", _nvml())
    _write_json(rec / "host" / "probe.json", {"errors": []})
    _write_json(rec / "host" / "fs.json", {"shm_bytes": 1})
    _bad_recording_file(case, rec)
    _replay_one_line_or_verdict(rec, capsys, must_refuse=True)


def _hostile_text(case: str) -> tuple[str, str]:
    """(host/ file, content): raw tool outputs as an attacker writes them."""
    big = "9" * 5000
    bomb = ['<?xml version="1.0"?>', "<!DOCTYPE l [", '<!ENTITY a "lollollollollol">']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        bomb.append(f'<!ENTITY {name} "{("&" + prev + ";") * 10}">')
    bomb += ["]>", "<nvidia_smi_log><driver_version>&i;</driver_version></nvidia_smi_log>"]
    return {
        "xml-billion-laughs": ("nvidia-smi-q.xml", "\n".join(bomb)),
        "xml-deep": ("nvidia-smi-q.xml", "<a>" * 100_000 + "</a>" * 100_000),
        "xml-huge-driver": (
            "nvidia-smi-q.xml",
            f"<nvidia_smi_log><driver_version>{big}.1</driver_version><cuda_version>{big}.0"
            f"</cuda_version><attached_gpus>1</attached_gpus><gpu id='0'><product_name>H200"
            f"</product_name><fb_memory_usage><total>{big} MiB</total></fb_memory_usage>"
            f"<minor_number>{big}</minor_number></gpu></nvidia_smi_log>",
        ),
        "xml-external-entity": (
            "nvidia-smi-q.xml",
            '<?xml version="1.0"?><!DOCTYPE l [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            "<nvidia_smi_log><driver_version>&x;</driver_version></nvidia_smi_log>",
        ),
        "nvcc-huge": ("nvcc-version.txt", f"Cuda compilation tools, release {big}.1, V{big}\n"),
        "proc-huge": (
            "proc-driver-version.txt",
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {big}.65.06  Sun Jul 27 2025\n",
        ),
        "table-huge": (
            "nvidia-smi.txt",
            f"| NVIDIA-SMI {big}.65.06   Driver Version: {big}.65.06   CUDA Version: {big}.0 |\n"
            f"|   {big}  NVIDIA H200   On  |   00000000:18:00.0 Off |  0 |\n"
            f"| N/A   30C    P0   {big}W / 700W |   {big}MiB / {big}MiB |  0%  Default |\n",
        ),
        "csv-huge": (
            "query.csv",
            "index, name, uuid, pci.bus_id, driver_version, memory.total [MiB], compute_cap\n"
            f"{big}, NVIDIA H200, GPU-1, 00000000:18:00.0, {big}.65.06, {big} MiB, {big}.0\n",
        ),
        "binary-table": ("nvidia-smi.txt", "\x00\x1b[31m\xff" * 1000),
        "topo-escape": ("topo.txt", "GPU0\tX\tNV18\x1b]0;owned\x07\n" * 10),
    }[case]


HOSTILE_TEXT = [
    "xml-billion-laughs",
    "xml-deep",
    "xml-huge-driver",
    "xml-external-entity",
    "nvcc-huge",
    "proc-huge",
    "table-huge",
    "csv-huge",
    "binary-table",
    "topo-escape",
]


@pytest.mark.parametrize("case", HOSTILE_TEXT)
def test_replay_of_hostile_tool_output_is_a_verdict_or_one_line(case, tmp_path, capsys) -> None:
    rec = tmp_path / "rec"
    _write_json(rec / "env.json", _rich_env())
    name, text = _hostile_text(case)
    (rec / "host").mkdir()
    (rec / "host" / name).write_text(text)
    _, output = _replay_one_line_or_verdict(rec, capsys)
    assert "root:" not in output  # no external entity was fetched


# ------------------------------------------------------------ external programs: bounded waits


def _marked_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _gone(marker: str) -> bool:
    """True once no process carries `marker` (SIGKILLed processes vanish as they are reaped)."""
    import time

    for _ in range(100):
        if not _marked_processes(marker):
            return True
        time.sleep(0.05)
    return False


def _hung_tool(path: Path, marker: str) -> None:
    """A tool that never answers and started a helper of its own (both carry `marker`)."""
    path.write_text(
        "#!/bin/sh\n"
        f"sh -c 'sleep 1000; echo {marker}-helper' &\n"
        f"sh -c 'sleep 1000; echo {marker}-main'\n"
    )
    path.chmod(0o755)


@pytest.mark.integration
def test_run_capture_kills_the_whole_group_on_time_out(tmp_path) -> None:
    from envtool.adapters.proc import run_capture

    marker = f"envtool-h10-{os.getpid()}-rc"
    _hung_tool(tmp_path / "tool", marker)
    res = run_capture([str(tmp_path / "tool")], timeout=0.5)
    assert res.timed_out and res.returncode is None
    assert _gone(marker), _marked_processes(marker)


@pytest.mark.slow
@pytest.mark.integration
def test_doctor_reports_hung_nvidia_smi_and_nvcc_and_leaves_nothing_running(tmp_path) -> None:
    """A nvidia-smi and an nvcc that never answer: doctor --fast returns, says which did not
    answer in how long, and no process of theirs survives (was 70 s and orphans)."""
    import subprocess
    import sys

    from conftest import REPO

    marker = f"envtool-h10-{os.getpid()}-doctor"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("nvidia-smi", "nvcc"):
        _hung_tool(bin_dir / tool, marker)
    env = dict(os.environ)
    env |= {"PATH": f"{bin_dir}:{env['PATH']}", "CUDA_HOME": str(tmp_path / "no-cuda")}
    env["ENVTOOL_NVML_TIMEOUT"] = "2"  # the nvidia-smi bound follows the NVML one
    rec = tmp_path / "rec"
    proc = subprocess.run(
        [sys.executable, "-m", "envtool", "doctor", "--fast", "--verbose", "--record", str(rec)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert "nvidia-smi -q -x did not answer in 2 s — the driver may be hung" in proc.stdout
    assert "nvcc did not answer in 5 s" in proc.stdout
    assert proc.stdout.count("did not answer") <= 4  # no second nvidia-smi was started
    assert _gone(marker), _marked_processes(marker)
    # the time-out is a recorded fact: a replay says the same
    replay = subprocess.run(
        [sys.executable, "-m", "envtool", "doctor", "--replay", str(rec), "--verbose"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "nvidia-smi -q -x did not answer in 2 s" in replay.stdout, replay.stderr


def test_a_hung_nvidia_smi_beside_a_known_driver_is_a_hung_driver() -> None:
    import json

    from envtool.core.checks import check_nvidia_driver
    from envtool.core.facts import EnvFacts
    from envtool.core.host_record import facts_from_record

    errors = ["nvidia-smi -q -x did not answer in 10 s — the driver may be hung"]
    raw = {
        "proc-driver-version.txt": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  "
        "Sun Jul 27 07:09:17 UTC 2025\n",
        "probe.json": json.dumps({"errors": errors, "timed_out": ["nvidia-smi"]}),
    }
    facts = facts_from_record(raw)
    assert facts.driver_version == "580.65.06" and facts.driver_hung
    check = check_nvidia_driver(facts, EnvFacts())
    assert check.status == "fail" and errors[0] in check.evidence


# ------------------------------------------------------------------------ names, dirs, values

BAD_NAMES = ["a" * 300, "x\x01y", "x\ny", "..", "a/../b", "-rf", "x\x1b]0;t\x07"]
NAME_COMMANDS = [
    ["install", "{}"],
    ["info", "{}"],
    ["verify", "{}"],
    ["remove", "{}", "--yes"],
    ["doctor", "{}", "--fast"],
    ["shell-hook", "{}"],
    ["run", "-n", "{}", "true"],
    ["export", "{}"],
    ["create", "{}", "--no-install", "--cuda", "cpu"],
    ["lock", "{}"],
    ["bundle", "{}", "-o", "out"],
]


@pytest.mark.parametrize(
    "name",
    BAD_NAMES,
    ids=["300-chars", "ctrl-a", "newline", "dotdot", "climb", "option", "osc-escape"],
)
@pytest.mark.parametrize("argv", NAME_COMMANDS, ids=lambda a: a[0])
def test_every_command_refuses_a_bad_env_name_in_one_line(
    argv, name, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENVTOOL_ENVS_DIR", str(tmp_path / "envs"))
    args = [name if a == "{}" else a for a in argv]
    if name.startswith("-") and argv[0] != "run":  # an option-looking NAME comes after `--`
        args = [argv[0], *[a for a in argv[1:] if a != "{}"], "--", name]
    code, out, err = _run_main(args, capsys)
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2, (code, out[-300:], err[-300:])
    assert "Traceback" not in err and len(lines) == 1, err
    assert "\x1b" not in err and "\x01" not in err  # the name is escaped when echoed
    assert not (tmp_path / "envs").exists() and not (tmp_path / "environments").exists()


@pytest.mark.parametrize("var", ["ENVTOOL_ENVS_DIR", "ENVTOOL_CACHE_DIR"])
@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["info", "x"],
        ["doctor", "x", "--fast"],
        ["remove", "x", "--yes"],
        ["install", "x", "--lock", "conda-lock.yml"],
    ],
    ids=lambda a: a[0],
)
def test_a_dir_variable_pointing_at_a_file_is_one_line(
    var, argv, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("ENVTOOL_ENVS_DIR", str(tmp_path / "envs"))
    monkeypatch.setenv(var, str(blocker / "sub") if argv[0] == "list" else str(blocker))
    (tmp_path / "envs" / "x" / "conda-meta").mkdir(parents=True)
    (tmp_path / "envs" / "x" / "conda-meta" / "history").write_text("")
    (tmp_path / "conda-lock.yml").write_text("version: 1\nmetadata: {}\npackage: []\n")
    code, out, err = _run_main(argv, capsys)
    lines = [x for x in err.splitlines() if x.strip()]
    if var == "ENVTOOL_CACHE_DIR" and argv[0] in ("list", "info", "doctor", "remove"):
        assert code in (0, 1), err  # these never touch the cache
        return
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert var in lines[0] and "not a directory" in lines[0]


def test_empty_values_are_not_defaults(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for argv, words in [
        (["create", "x", "--no-install", "--cuda", ""], "--cuda '': empty"),
        (["create", "x", "--no-install", "--cuda", "cpu", "--torch", " "], "--torch '': empty"),
        (["doctor", "", "--fast"], "NAME '': empty"),
        (["doctor", "--prefix", "", "--fast"], "--prefix '': empty"),
        (["launch", "t.py", "--cpu", "--nproc", "100000"], "more than 1024 processes"),
    ]:
        code, out, err = _run_main(argv, capsys)
        lines = [x for x in err.splitlines() if x.strip()]
        assert code == 2 and len(lines) == 1 and words in lines[0], (argv, err)
    assert not (tmp_path / "environments").exists()


# ---------------------------------------------------------------- permissions, as a non-root user

NOBODY = 65534
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _can_run_as_nobody() -> str | None:
    """Why the permission tests cannot run here (None: they can). The venv's python lives under
    /root (0700), so envtool runs as nobody under the system python of the same version with the
    venv's site-packages on PYTHONPATH."""
    import sys

    if os.geteuid() != 0:
        return "needs root to switch to uid 65534"
    if not SYSTEM_PYTHON.exists():
        return f"no {SYSTEM_PYTHON} to run envtool as nobody"
    import subprocess

    out = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if out != str(sys.version_info[:2]):
        return f"{SYSTEM_PYTHON} is {out}, the venv is {sys.version_info[:2]}"
    return None


def _nobody_envtool(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    import site
    import subprocess
    import sys

    from conftest import REPO

    site_dirs = [p for p in site.getsitepackages() if p.startswith(sys.prefix)]
    full = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join([str(REPO), *site_dirs]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
        **env,
    }

    def drop() -> None:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    proc = subprocess.run(
        [str(SYSTEM_PYTHON), "-s", "-m", "envtool", *args],
        env=full,
        cwd=cwd,
        preexec_fn=drop,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def nobody_world():
    """A world nobody can read: a small built channel and a lock over it, under a 0755 dir."""
    import shutil
    import tempfile

    import channel_builder as cb

    why = _can_run_as_nobody()
    if why:
        pytest.skip(why)
    base = Path(tempfile.mkdtemp(prefix="envtool-nobody-"))
    base.chmod(0o755)
    channel = cb.build_channel(base / "channel", cb.synthetic_graph(2, 1))
    records = cb.solve_records(channel, ["synthetic-all"], cuda=None)
    lock = cb.write_lock(base / "lock" / "conda-lock.yml", records, channel.as_uri())
    for root, dirs, files in os.walk(base):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    yield base, lock
    shutil.rmtree(base, ignore_errors=True)


def _home(work: Path, owner: int = NOBODY) -> Path:
    home = work / "home"
    home.mkdir(parents=True)
    os.chown(home, owner, owner)
    return home


def _case_dir(base: Path, name: str) -> Path:
    work = base / name
    work.mkdir()
    work.chmod(0o755)
    return work


def _assert_one_line_naming(code: int, out: str, err: str, path: Path) -> None:
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("installing")]
    assert code == 2, (code, out[-400:], err[-800:])
    assert "Traceback" not in err, err[-1500:]
    assert len(lines) == 1 and lines[0].startswith("envtool: error:"), err[-800:]
    assert str(path) in lines[0], lines[0]


@pytest.mark.integration
def test_install_under_a_read_only_prefix_parent(nobody_world) -> None:
    base, lock = nobody_world
    work = _case_dir(base, "ro-parent")
    home = _home(work)
    ro = work / "ro"  # root's, 0755: nobody cannot create in it
    ro.mkdir()
    env = {"HOME": str(home), "ENVTOOL_CACHE_DIR": str(home / "cache")}
    args = ["install", "--lock", str(lock), "--prefix", str(ro / "env")]
    _assert_one_line_naming(*_nobody_envtool(args, env, home), ro)
    assert not (ro / "env").exists()


@pytest.mark.integration
def test_install_with_an_unwritable_cache_dir(nobody_world) -> None:
    base, lock = nobody_world
    work = _case_dir(base, "ro-cache")
    home = _home(work)
    cache = work / "cache"
    cache.mkdir()
    env = {"HOME": str(home), "ENVTOOL_CACHE_DIR": str(cache)}
    args = ["install", "--lock", str(lock), "--prefix", str(home / "env")]
    _assert_one_line_naming(*_nobody_envtool(args, env, home), cache)


@pytest.mark.integration
def test_install_with_a_file_where_the_cache_dir_goes(nobody_world) -> None:
    base, lock = nobody_world
    work = _case_dir(base, "file-cache")
    home = _home(work)
    blocker = home / "cache"
    blocker.write_text("x")
    os.chown(blocker, NOBODY, NOBODY)
    env = {"HOME": str(home), "ENVTOOL_CACHE_DIR": str(blocker / "envtool")}
    args = ["install", "--lock", str(lock), "--prefix", str(home / "env")]
    _assert_one_line_naming(*_nobody_envtool(args, env, home), blocker)


@pytest.mark.integration
def test_install_into_an_unwritable_envs_dir(nobody_world) -> None:
    base, lock = nobody_world
    work = _case_dir(base, "ro-envs")
    home = _home(work)
    envs = work / "envs"
    envs.mkdir()
    env = {"HOME": str(home), "ENVTOOL_CACHE_DIR": str(home / "c"), "ENVTOOL_ENVS_DIR": str(envs)}
    args = ["install", "x", "--lock", str(lock)]
    _assert_one_line_naming(*_nobody_envtool(args, env, home), envs)


@pytest.mark.integration
def test_install_with_an_unwritable_home(nobody_world) -> None:
    base, lock = nobody_world
    work = _case_dir(base, "ro-home")
    home = _home(work, owner=0)  # root's: nothing under it can be created
    args = ["install", "x", "--lock", str(lock)]
    _assert_one_line_naming(*_nobody_envtool(args, {"HOME": str(home)}, home), home)


@pytest.mark.integration
def test_bundle_into_an_unwritable_dir(nobody_world) -> None:
    base, lock = nobody_world
    work = _case_dir(base, "ro-bundle")
    home = _home(work)
    ro = work / "ro"
    ro.mkdir()
    env = {"HOME": str(home), "ENVTOOL_CACHE_DIR": str(home / "cache")}
    args = ["bundle", "--lock", str(lock), "-o", str(ro / "out")]
    _assert_one_line_naming(*_nobody_envtool(args, env, home), ro / "out")
    assert not (ro / "out").exists()


@pytest.mark.integration
@pytest.mark.parametrize(
    "argv", [["remove", "x", "--yes"], ["install", "x", "--lock", "{lock}", "--force"]]
)
def test_another_users_env_is_refused_in_one_line(argv, nobody_world) -> None:
    from conftest import run_envtool

    base, lock = nobody_world
    work = _case_dir(base, f"other-user-{argv[0]}")
    envs = work / "envs"
    envs.mkdir()
    root_env = {**os.environ, "ENVTOOL_ENVS_DIR": str(envs)}
    root_env["ENVTOOL_CACHE_DIR"] = str(work / "root-cache")
    made = run_envtool("install", "x", "--lock", str(lock), env=root_env, cwd=work)
    assert made.returncode == 0, made.stderr
    home = _home(work)
    env = {"HOME": str(home), "ENVTOOL_CACHE_DIR": str(home / "c"), "ENVTOOL_ENVS_DIR": str(envs)}
    args = [str(lock) if a == "{lock}" else a for a in argv]
    code, out, err = _nobody_envtool(args, env, home)
    _assert_one_line_naming(code, out, err, envs)
    assert (envs / "x" / "conda-meta").is_dir()  # root's env is intact


@pytest.mark.parametrize("case", ["billion-laughs", "too-large", "duplicate-key", "utf-16"])
def test_export_reads_the_request_beside_the_lock_bounded(case, tmp_path) -> None:
    """export reads the lock's request files (metadata.sources) like every env file."""
    import shutil

    from envtool.commands.export import read_request
    from envtool.errors import UsageError

    src = _env_file_cases(tmp_path)[case]
    lock_dir = tmp_path / "environments" / "x"
    lock_dir.mkdir(parents=True)
    shutil.copy(src, lock_dir / "environment.yml")
    with pytest.raises(UsageError) as info:
        read_request(lock_dir / "conda-lock.yml", ["environment.yml"])
    assert "environment.yml" in info.value.one_line() and len(info.value.one_line()) < 600


# ------------------------------------------------------------- the env's own files and python


def _fake_env(tmp: Path, probe_output: str | None = None) -> Path:
    """An env prefix whose `python` prints `probe_output` (a hijacked or broken interpreter)."""
    prefix = tmp / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "conda-meta").mkdir()
    (prefix / "conda-meta" / "history").write_text("")
    site = prefix / "lib" / "python3.11" / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_text("__version__ = '2.5.1+cu121'\ncuda = '12.1'\n")
    py = prefix / "bin" / "python"
    out = (probe_output or "").replace("'", "'\\''")
    py.write_text(f"#!/bin/sh\nprintf '%s\\n' '{out}'\n")
    py.chmod(0o755)
    return prefix


@pytest.mark.integration
@pytest.mark.parametrize(
    "payload",
    [
        '{"torch": {"version": ["2.5"], "cuda": "12.1"}}',
        '{"torch": {"version": "2.5.1", "capabilities": [9.0]}}',
        '{"torch": {"version": "2.5.1", "cuda": "' + "9" * 5000 + '"}}',
        '{"python_version": {"a": 1}}',
        '{"site_dirs": [1, 2]}',
        '{"torch": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"torch": {"version": "2.5.1", "arch_list": "sm_90"}}',
    ],
    ids=[
        "list-version",
        "float-cap",
        "5000-digit-cuda",
        "dict-python",
        "int-site",
        "deep",
        "str-list",
    ],
)
def test_a_hostile_probe_output_is_a_crashed_probe_not_a_traceback(payload, tmp_path, capsys):
    prefix = _fake_env(tmp_path, "ENVTOOL_PROBE_JSON:" + payload)
    code, out, err = _run_main(["doctor", "--prefix", str(prefix), "--verbose"], capsys)
    assert code in (0, 1) and "Traceback" not in err, (code, err[-800:])
    assert "crashed importing torch" in out or "unusable probe output" in out, out[-800:]


@pytest.mark.parametrize("case", ["fifo-record", "fifo-installer", "huge-version", "deep-record"])
def test_doctor_fast_reads_the_envs_files_bounded(case, tmp_path, capsys) -> None:
    prefix = _fake_env(tmp_path)
    meta = prefix / "conda-meta"
    site = prefix / "lib" / "python3.11" / "site-packages"
    if case == "fifo-record":
        os.mkfifo(meta / "pytorch-2.5.1-cuda121.json")
    elif case == "fifo-installer":
        (site / "torch-2.5.1.dist-info").mkdir()
        os.mkfifo(site / "torch-2.5.1.dist-info" / "INSTALLER")
        os.mkfifo(site / "torch-2.5.1.dist-info" / "METADATA")
    elif case == "huge-version":
        rec = {"name": "pytorch", "version": "9" * 5000, "build": "cuda121_0"}
        _write_json(meta / "pytorch-9-cuda121_0.json", rec)
        (site / "torch" / "version.py").write_text(f"__version__ = '{'9' * 5000}'\n")
    elif case == "deep-record":
        (meta / "cuda-version-12.1-h0.json").write_text("[" * 100_000 + "]" * 100_000)
    code, out, err = _run_main(["doctor", "--prefix", str(prefix), "--fast", "--verbose"], capsys)
    assert code in (0, 1) and "Traceback" not in err, (code, err[-800:])


@pytest.mark.parametrize("flag", ["--torch", "--python", "--cuda", "--driver"])
def test_a_5000_digit_version_flag_is_one_short_line(flag, run_cli, tmp_path) -> None:
    value = "2." + "9" * 5000
    code, out, err = run_cli(["create", "x", "--no-install", flag, value, *H200[2:]], tmp_path)
    _one_line_error(code, out, err, flag)
    code, out, err = run_cli(["doctor", "--fast", "--driver", value], tmp_path)
    _one_line_error(code, out, err, "--driver")
