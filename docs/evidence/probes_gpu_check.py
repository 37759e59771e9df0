"""GPU check for the host and env probes (run by the lead on a GPU machine; see probes-gpu.md).

Usage: PYTHONPATH=. python docs/evidence/probes_gpu_check.py OUTDIR [--python PATH_TO_CUDA_TORCH_PYTHON]
Writes OUTDIR/host-record/* (a real record, reusable as a replay fixture) and OUTDIR/summary.json.
Exits 1 if NVML and nvidia-smi disagree or the record does not replay to the same facts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from envtool.adapters.host.env_probe import probe_env
from envtool.adapters.host.host_probe import probe_host
from envtool.adapters.locate import resolve_target
from envtool.core.host_record import facts_from_record


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    rec_dir = out / "host-record"
    rec_dir.mkdir(parents=True, exist_ok=True)
    record: dict[str, str] = {}
    live = probe_host(record=record)
    for name, text in record.items():
        (rec_dir / name).write_text(text)
    smi_record: dict[str, str] = {}
    smi = probe_host(nvml=None, record=smi_record)  # the nvidia-smi fallback on the same host
    for name, text in smi_record.items():
        (rec_dir / f"smi-path--{name}").write_text(text)

    def key(f):
        gpus = [
            (g.name, g.capability, g.memory_mib, g.uuid, g.bus_id, g.mig_enabled) for g in f.gpus
        ]
        return f.driver_version, f.driver_cuda, gpus, f.nvlink

    problems = []
    if live.source != "nvml":
        problems.append(
            f"live probe did not use NVML: source={live.source} errors={live.probe_errors}"
        )
    if key(live) != key(smi):
        problems.append(f"NVML and nvidia-smi disagree:\n  nvml: {key(live)}\n  smi:  {key(smi)}")
    if facts_from_record(record) != live:
        problems.append("record does not replay to the live facts")
    summary = {"nvml": live.to_dict(), "nvidia_smi": smi.to_dict(), "problems": problems}
    if len(argv) > 2 and argv[1] == "--python":
        env = probe_env(resolve_target(python=argv[2]))
        summary["env"] = env.to_dict()
        t = env.torch
        if (
            env.status != "ok"
            or t is None
            or not t.is_available
            or t.device_count != len(live.gpus)
        ):
            problems.append(f"env probe: status={env.status} torch={t} error={env.error}")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
