"""Run BY THE TARGET ENVIRONMENT'S PYTHON as a file (`<env>/bin/python env_probe_script.py`).

Never imported by envtool. Standard library + torch only, Python >= 3.8 syntax, so it works in
any environment a user points envtool at. Prints one line: MARKER + a JSON object. Everything
that can fail is caught and reported as text, because the caller needs facts, not a traceback.
"""

import json
import os
import platform
import site
import sys
import warnings

MARKER = "ENVTOOL_PROBE_JSON:"

# Running a file puts its own folder (envtool/adapters) first on sys.path; drop it so nothing
# there can shadow a module torch imports. The rest of sys.path (PYTHONPATH, user site) stays on
# purpose: the probe should import the torch that `python train.py` would import.
_here = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == _here:
    del sys.path[0]


def _err(exc):
    return f"{type(exc).__name__}: {exc}"


def _site_dirs():
    dirs = []
    try:
        dirs.extend(site.getsitepackages())
    except Exception:
        pass
    try:
        if site.ENABLE_USER_SITE:
            dirs.append(site.getusersitepackages())
    except Exception:
        pass
    return [d for d in dirs if os.path.isdir(d)]


def _nccl_version(torch):
    try:
        v = torch.cuda.nccl.version()
    except Exception:
        return None
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    if isinstance(v, int):  # old torch returns NCCL_VERSION_CODE: 2708 -> 2.7.8, 21003 -> 2.10.3
        base = 10000 if v >= 10000 else 1000
        return f"{v // base}.{(v % base) // 100}.{v % 100}"
    return str(v)


def probe_torch(torch):
    info = {
        "version": str(getattr(torch, "__version__", None)),
        "cuda": getattr(torch.version, "cuda", None),
        "cudnn": None,
        "nccl": None,
        "is_available": None,
        "available_message": None,
        "device_count": None,
        "arch_list": [],
        "capabilities": [],
        "path": getattr(torch, "__file__", None),
    }
    if info["cuda"] is None and not getattr(torch.version, "hip", None):
        # CPU build: is_available() is a cheap False here and initializes nothing.
        try:
            info["is_available"] = bool(torch.cuda.is_available())
        except Exception as exc:
            info["available_message"] = _err(exc)
        info["device_count"] = 0
        return info

    try:
        info["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    info["nccl"] = _nccl_version(torch)

    messages = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            info["is_available"] = bool(torch.cuda.is_available())
        except Exception as exc:
            info["is_available"] = False
            messages.append(_err(exc))
    messages.extend(str(w.message) for w in caught)
    if not info["is_available"]:
        # Where "driver too old (found version 11040)" / "Found no NVIDIA driver" come from.
        try:
            torch.cuda.init()
        except Exception as exc:
            messages.append(str(exc))
    info["available_message"] = "\n".join(m for m in messages if m) or None

    try:
        info["arch_list"] = list(torch.cuda.get_arch_list())
    except Exception:
        pass
    if not info["arch_list"]:  # get_arch_list() is [] without a usable GPU; the build still knows
        try:
            info["arch_list"] = list(torch._C._cuda_getArchFlags().split())
        except Exception:
            pass
    if info["is_available"]:
        try:
            info["device_count"] = int(torch.cuda.device_count())
            for i in range(info["device_count"]):
                major, minor = torch.cuda.get_device_capability(i)
                info["capabilities"].append(f"{major}.{minor}")
        except Exception as exc:
            info["available_message"] = (info["available_message"] or "") + _err(exc)
    else:
        info["device_count"] = 0
    return info


def main():
    out = {
        "python_version": platform.python_version(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "site_dirs": _site_dirs(),
        "torch": None,
        "torch_import_error": None,
    }
    try:
        import torch
    except BaseException as exc:  # ImportError, OSError from a missing libcudart, SystemExit, ...
        out["torch_import_error"] = _err(exc)
    else:
        try:
            out["torch"] = probe_torch(torch)
        except Exception as exc:  # torch imported fine; say what is known and why the rest is not
            out["torch"] = {
                "version": str(getattr(torch, "__version__", None)),
                "path": getattr(torch, "__file__", None),
                "available_message": "envtool probe failed: " + _err(exc),
            }
    sys.stdout.write("\n" + MARKER + json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
