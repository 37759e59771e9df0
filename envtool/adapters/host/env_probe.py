"""In-environment probe: what torch the target environment really has, seen by its own python.

envtool never imports torch itself: the environment's interpreter runs `env_probe_script.py` and
prints JSON. Installed packages are also read from files (conda-meta/*.json, *.dist-info), which
needs no python at all (`read_installed`, `read_torch_static` power `doctor --fast`).
Nothing here raises: a time-out, a crash or a missing python is a status in EnvFacts.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

from envtool.adapters.files import RECORD_LIMIT, read_bytes
from envtool.adapters.locate import Target
from envtool.adapters.proc import Runner, run_capture
from envtool.core.facts import EnvFacts, TorchFacts, check_value, from_dict
from envtool.errors import UsageError

SCRIPT = Path(__file__).with_name("env_probe_script.py")
MARKER = "ENVTOOL_PROBE_JSON:"  # same string as in env_probe_script.py (it cannot import us)

# conda packages that decide which torch/CUDA an environment runs.
RELEVANT_CONDA = frozenset(
    {
        "pytorch",
        "pytorch-cuda",
        "pytorch-mutex",
        "cpuonly",
        "cuda-version",
        "cudatoolkit",
        "cuda-runtime",
        "cuda-cudart",
        "libtorch",
        "pytorch-gpu",
        "pytorch-cpu",
        "nccl",
        "cudnn",
    }
)
_TORCH_DIST = re.compile(r"^torch-([^-]+)\.(dist-info|egg-info)$")


def probe_env(
    target: Target,
    timeout: float = 120.0,
    runner: Runner = run_capture,
    cancel: threading.Event | None = None,
) -> EnvFacts:
    """Run the probe script with the target's python and merge what the files say.

    status: ok (JSON came back; `error` is set if python then died at exit), timeout, crashed
    (no JSON: `error` has the exit/signal and the stderr tail), no-python. Never raises."""
    facts = EnvFacts(
        python_exe=str(target.python),
        prefix=str(target.prefix) if target.prefix else None,
        name=target.name,
    )
    if target.prefix is not None:
        facts.conda_packages, facts.pip_torch = read_installed(target.prefix)

    if not Path(target.python).exists():
        facts.status = "no-python"
        facts.error = f"{target.python}: no such file"
        return facts

    # No -I / -E / -s: PYTHONPATH and the user site stay, so the probe imports the torch a user's
    # `python train.py` imports (a torch in ~/.local shadowing the env's is a finding, and
    # torch.__file__ shows it). The script drops its own folder from sys.path itself.
    extra = {"cancel": cancel} if cancel is not None else {}
    res = runner([str(target.python), str(SCRIPT)], timeout=timeout, **extra)
    if res.missing:
        facts.status, facts.error = "no-python", f"{target.python}: {res.stderr.strip()}"
        return facts
    if res.timed_out:
        facts.status = "timeout"
        if cancel is not None and cancel.is_set():
            facts.error = f"{target.python}: stopped waiting for the probe (the NVIDIA driver it initializes CUDA through is not answering)"
        else:
            facts.error = f"{target.python} did not finish the probe in {timeout:g}s (hung, most often in `import torch` or CUDA initialization)"
        return facts

    data = _parse_output(res.stdout)
    if data is None:
        facts.status = "crashed"
        facts.error = (
            f"{target.python} {_exit_text(res.returncode)}: {_tail(res.stderr or res.stdout)}"
        )
        return facts
    if not res.ok:  # JSON printed, then the interpreter died at exit (seen with CUDA libraries)
        facts.error = (
            f"probe finished but python {_exit_text(res.returncode)} at exit: {_tail(res.stderr)}"
        )

    # the env's python (or whatever sits at its path) is not trusted to print the format: every
    # value is type-checked here, so a check never meets a list where a version goes
    source = f"{target.python} (probe output)"
    try:
        for key in ("python_version", "torch_import_error"):
            setattr(facts, key, check_value(data.get(key), str | None, source, key, key))
        if isinstance(data.get("torch"), dict):
            facts.torch = from_dict(TorchFacts, _torch_fields(data["torch"]), source, "torch.")
        site_dirs = check_value(data.get("site_dirs") or [], list[str], source, "site_dirs")
    except UsageError as exc:
        facts.status, facts.error = "crashed", f"unusable probe output: {exc.message}"
        facts.torch = facts.python_version = facts.torch_import_error = None
        return facts
    # Also look where the interpreter looks (user site, a venv's site-packages) for extra torches.
    seen = {os.path.realpath(p["location"]) for p in facts.pip_torch}  # same dir, other spelling
    for entry in read_pip_torch([Path(d) for d in site_dirs]):
        if os.path.realpath(entry["location"]) not in seen:
            facts.pip_torch.append(entry)
            seen.add(os.path.realpath(entry["location"]))
    return facts


def _parse_output(stdout: str) -> dict[str, Any] | None:
    from envtool.core.safe_load import parse_json

    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                data = parse_json(line[len(MARKER) :], "probe output")  # bounded depth
            except UsageError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _tail(text: str, limit: int = 2000) -> str:
    text = (text or "").strip()
    return text[-limit:] if text else "(no output)"


def _torch_fields(d: dict[str, Any]) -> dict[str, Any]:
    """The script's torch dict with what old torches report loosely made plain: a cudnn or
    device count that is not an int is unknown, an empty list is a list (then type-checked)."""

    def as_int(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    out = dict(d)
    out["cudnn"], out["device_count"] = as_int(d.get("cudnn")), as_int(d.get("device_count"))
    out["arch_list"] = d.get("arch_list") or []
    out["capabilities"] = d.get("capabilities") or []
    return out


# ---------------------------------------------------------------- static reads (no python)


def site_packages_dirs(prefix: Path) -> list[Path]:
    """<prefix>/lib/python3.X/site-packages (POSIX) and <prefix>/Lib/site-packages (Windows)."""
    prefix = Path(prefix)
    dirs = sorted(prefix.glob("lib/python*/site-packages"))
    win = prefix / "Lib" / "site-packages"
    if win.is_dir():
        dirs.append(win)
    return [d for d in dirs if d.is_dir()]


def read_conda_packages(prefix: Path) -> dict[str, dict[str, str]]:
    """Relevant records from <prefix>/conda-meta/*.json -> {name: {version, build, channel}}."""
    out: dict[str, dict[str, str]] = {}
    meta = Path(prefix) / "conda-meta"
    if not meta.is_dir():
        return out
    for path in sorted(meta.glob("*.json")):
        name = path.name.rsplit("-", 2)[0]  # <name>-<version>-<build>.json; skip unrelated early
        if name not in RELEVANT_CONDA:
            continue
        rec = _read_json(path)
        if rec is None or rec.get("name") not in RELEVANT_CONDA:
            continue  # a half-written record is the installer's problem, reported elsewhere
        if not _is_version(rec.get("version")):
            continue  # not a record conda or envtool wrote (a 5000-digit "version")
        out[rec["name"]] = {
            "version": str(rec.get("version", "")),
            "build": str(rec.get("build", "")),
            "channel": _channel_name(rec),
        }
    return out


def _channel_name(rec: dict[str, Any]) -> str:
    """'https://conda.anaconda.org/pytorch/linux-64' -> 'pytorch'; conda's own 'schannel' wins."""
    if rec.get("schannel"):
        return str(rec["schannel"])
    channel = str(rec.get("channel", "") or "")
    channel = re.sub(
        r"/(noarch|linux-64|linux-aarch64|linux-ppc64le|osx-64|osx-arm64|win-64)/?$", "", channel
    )
    m = re.match(r"^https?://conda\.anaconda\.org/([^/]+)$", channel)
    return m.group(1) if m else channel


def read_pip_torch(site_dirs: list[Path]) -> list[dict[str, str]]:
    """Every torch-*.dist-info / torch-*.egg-info: {name, version, installer, location}.

    INSTALLER says who put it there ("conda" vs "pip"/"uv"); two entries mean two torches."""
    found: list[dict[str, str]] = []
    for d in site_dirs:
        if not Path(d).is_dir():
            continue
        for entry in sorted(Path(d).iterdir()):
            m = _TORCH_DIST.match(entry.name)
            if not m:
                continue
            version = m.group(1)
            installer = "unknown"
            if entry.is_dir():
                meta = entry / ("METADATA" if m.group(2) == "dist-info" else "PKG-INFO")
                version = _metadata_version(meta) or version
                installer = (_read_small(entry / "INSTALLER", 4096) or "").strip() or "unknown"
            found.append(
                {
                    "name": "torch",
                    "version": version,
                    "installer": installer,
                    "location": str(entry),
                }
            )
    return found


def _metadata_version(path: Path) -> str | None:
    text = _read_small(path, RECORD_LIMIT)
    for line in (text or "").splitlines():
        if line.startswith("Version:"):
            version = line.split(":", 1)[1].strip()
            return version if _is_version(version) else None
        if not line.strip():
            break  # headers end at the first blank line
    return None


def _read_small(path: Path, limit: int) -> str | None:
    """A file of the environment, read as the probe reads everything there: regular files only,
    non-blocking (a FIFO named INSTALLER must not hang doctor), at most `limit` bytes; None
    when it is not that."""
    try:
        return read_bytes(path, limit).decode("utf-8", errors="replace")
    except UsageError:
        return None


def _read_json(path: Path) -> dict[str, Any] | None:
    from envtool.core.safe_load import parse_json

    text = _read_small(path, RECORD_LIMIT)
    if text is None:
        return None
    try:
        data = parse_json(text, str(path))
    except UsageError:
        return None
    return data if isinstance(data, dict) else None


def _is_version(value: Any) -> bool:
    """A version string the checks can compare (they parse it; 5000 digits is none)."""
    from envtool.core.versions import parse_version

    if not isinstance(value, str) or len(value) > 256:
        return False
    try:
        parse_version(value)
    except ValueError:
        return False
    return True


def read_installed(prefix: Path) -> tuple[dict[str, dict[str, str]], list[dict[str, str]]]:
    """(conda_packages, pip_torch) read from files only; no python is run."""
    return read_conda_packages(prefix), read_pip_torch(site_packages_dirs(prefix))


_VERSION_LINE = re.compile(r"^__version__\s*(?::[^=]+)?=\s*['\"]([^'\"]+)['\"]", re.M)
_CUDA_LINE = re.compile(r"^cuda\s*(?::[^=]+)?=\s*(?:['\"]([^'\"]*)['\"]|None)", re.M)


def read_torch_static(prefix: Path) -> TorchFacts | None:
    """torch version and CUDA build from <site-packages>/torch/version.py, without importing it.

    None when no torch is installed under `prefix`."""
    for d in site_packages_dirs(prefix):
        vfile = d / "torch" / "version.py"
        text = _read_small(vfile, 1 << 20)
        if text is None:
            continue
        v = _VERSION_LINE.search(text)
        c = _CUDA_LINE.search(text)
        version = v.group(1) if v and _is_version(v.group(1)) else None
        cuda = c.group(1) if c and c.group(1) and _is_version(c.group(1)) else None
        return TorchFacts(
            version=version,
            cuda=cuda,
            path=str(d / "torch" / "__init__.py"),
        )
    return None
