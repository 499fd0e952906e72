"""Free loopback ports for the processes this package starts (Prometheus, Prefect, Flink)."""

from __future__ import annotations

import random
import socket
from collections.abc import Collection
from pathlib import Path

# The kernel hands out ports from this range to every socket bound to port 0 and to every outgoing connection. A
# port chosen inside it can be taken by any of those between the choice and the moment its server binds it (tens of
# seconds for a Prefect replica started after PostgreSQL and the migrations), so ports are chosen below it.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
FIRST_PORT = 20000  # above the well-known servers' ports (PostgreSQL, Redis, Prometheus, Flink, Spark)
MIN_CHOICE = 1000  # fewer ports than this below the ephemeral range: let the kernel choose instead
_pick = random.SystemRandom()  # not the `random` module's: two processes seeded alike would try the same ports


def _candidates() -> range | None:
    """The ports to choose from, below the kernel's ephemeral range; None where that range is unknown or too low."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(FIRST_PORT, low) if low - FIRST_PORT >= MIN_CHOICE else None


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports free right now (held open together, so no two are the same), outside the
    kernel's ephemeral range where it can be read."""
    pool = _candidates()
    sockets: list[socket.socket] = []
    try:
        for port in _pick.sample(pool, min(len(pool), 50 * n)) if pool else ():
            if len(sockets) == n:
                break
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            sockets.append(s)
        while len(sockets) < n:  # no range to choose from, or every try taken: the kernel chooses
            s = socket.socket()
            sockets.append(s)
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port(avoid: Collection[int] = ()) -> int:
    """One loopback port free right now, none of `avoid` (ports chosen for a process that has not bound them yet)."""
    port = free_ports(1)[0]
    while port in avoid:
        port = free_ports(1)[0]
    return port
