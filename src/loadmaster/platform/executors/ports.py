"""A free TCP port for a gang's rendezvous (MASTER_PORT)."""

from __future__ import annotations

import socket


def free_port(host: str = "") -> int:
    """A port nobody listens on now. The OS picks it from the ephemeral range, so two calls rarely
    collide; the port is only reserved until this returns, which is the usual torch.distributed risk."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port
