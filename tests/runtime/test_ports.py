"""`free_ports`: distinct ports, free, and outside the kernel's ephemeral range (where a port-0 server or an
outgoing connection could take one before its process binds it)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from daedalus.runtime import ports
from daedalus.runtime.ports import FIRST_PORT, free_port, free_ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    chosen = free_ports(20)
    assert len(set(chosen)) == 20
    assert all(FIRST_PORT <= p < low for p in chosen)
    for p in chosen:
        with socket.create_server(("127.0.0.1", p)):
            pass


def test_a_range_too_narrow_to_choose_from_leaves_the_choice_to_the_kernel(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    narrow = tmp_path / "ip_local_port_range"
    narrow.write_text(f"{FIRST_PORT + 10}\t60999\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", narrow)
    chosen = free_ports(3)
    assert len(set(chosen)) == 3 and all(p >= FIRST_PORT + 10 for p in chosen)
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", tmp_path / "missing")
    assert len(set(free_ports(3))) == 3


def test_a_port_to_avoid_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    offered = iter([[21000], [21000], [21001]])
    monkeypatch.setattr(ports, "free_ports", lambda n: next(offered))
    assert free_port(avoid={21000}) == 21001
