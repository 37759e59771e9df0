"""Running in an environment: activation text (activation), torchrun and its run folder (launcher,
runs), free ports (ports), the multi-node pre-flight (preflight, preflight_script: stdlib only)."""
