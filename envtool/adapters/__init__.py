"""Adapters: the only code that touches the host, subprocesses, the network and rattler."""
