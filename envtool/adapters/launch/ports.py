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


def probe_is_local_address(host: str) -> bool:
    """Is `host` an address of this machine? (Binding to it succeeds only if it is.)

    torchrun's c10d rendezvous decides who hosts the store by comparing the endpoint with the
    machine's *hostname* addresses; an endpoint given as an interface IP (a second NIC, a
    container or namespace address) does not match, and then no node hosts it and all wait."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((sockaddr[0], 0))
                return True
        except OSError:
            continue
    return False


def probe_port_in_use(host: str, port: int) -> bool:
    """Would a rendezvous store fail to listen on `port`? torch's TCPStore listens on every
    address (and sets SO_REUSEADDR, so a TIME_WAIT leftover is no conflict): a listener on
    the port at any local address, or on `host` itself, makes it fail with a traceback."""
    import errno

    addresses = [("0.0.0.0", socket.AF_INET)]
    try:
        for family, _, _, _, sockaddr in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP):
            addresses.append((sockaddr[0], family))
    except OSError:
        pass
    for address, family in addresses:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
    return False
