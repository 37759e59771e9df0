"""A free TCP port for the single-node rendezvous (29500 may already be taken)."""

from __future__ import annotations

import socket


def probe_free_port(host: str = "127.0.0.1") -> int:
    """Ask the kernel for an unused port on `host`.

    The port is released before torchrun binds it, so another program could take it in
    between; the window is milliseconds, and torchrun then fails loudly (never silently).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
