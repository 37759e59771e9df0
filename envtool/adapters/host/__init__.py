"""The host and the environments on it, probed: driver and GPUs (NVML, /proc, nvidia-smi, nvcc),
the target env's own python (env_probe), doctor's probing, record and replay (doctor_probe), and
`doctor --deep`'s GPU work (deep). The *_script.py files run in the env's python (stdlib only)."""
