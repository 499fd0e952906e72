"""Free loopback ports for the processes this package starts (Prometheus, Prefect, Flink)."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports free right now (held open together, so no two are the same)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    """One loopback port free right now."""
    return free_ports(1)[0]
