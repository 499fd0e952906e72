"""`daedalus fleet up/down`: the real PostgreSQL, Redis, HAProxy, Prefect API replicas, services and workers, on
loopback; every process they started is gone after `down`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_fixed

from daedalus.models.errors import ConnectorError
from daedalus.runtime import fleet as fleet_mod
from daedalus.runtime.fleet import Fleet, descendants, down, up
from daedalus.runtime.pending import STALE_AFTER_S, crash_stale_pending
from tests.helpers import DAEDALUS

pytestmark = pytest.mark.slow


@pytest.fixture
def fleet_dir() -> Iterator[Path]:
    """A folder the `postgres` user can reach (pytest's own tmp folders are 0700 up the tree)."""
    folder = Path(tempfile.mkdtemp(prefix="daedalus-fleet-test-"))
    os.chmod(folder, 0o755)
    yield folder
    if (folder / "fleet.json").exists():
        down(folder)
    shutil.rmtree(folder, ignore_errors=True)


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status


def _get_as_prefect(url: str) -> int:
    """A GET retried on 502 and 503 as Prefect's client retries them (prefect/client/base.py): the balancer answers
    502 to a request it had already handed to a replica as the replica died (once, in the first 0.01 s after a
    SIGKILL; the requests after it were refused by the dead port and redispatched to the live replica)."""
    return Retrying(retry=retry_if_exception(lambda e: isinstance(e, urllib.error.HTTPError) and e.code in (502, 503)),
                    stop=stop_after_attempt(4), wait=wait_fixed(0.5), reraise=True)(_get, url)


def test_up_serves_through_the_load_balancer_and_down_leaves_nothing_running(fleet_dir: Path) -> None:
    fleet = up(fleet_dir, pool="fleet-test")
    started = {name: fleet.process(name) for name in fleet.names}
    assert set(started) == {"postgres", "redis", "api-0", "api-1", "lb", "services", "worker-0", "worker-1"}
    assert all(p is not None and p.alive() for p in started.values())
    assert _get(f"{fleet.api_url}/health") == 200
    for port in fleet.ports.api:
        assert _get(f"http://127.0.0.1:{port}/api/health") == 200
    # Both workers registered on the one pool, through the load balancer.
    assert all(fleet._registered(f"worker-{i}") for i in range(2))
    # Prefect's parts on Redis: the services' docket (database 1) has its streams.
    import redis

    assert redis.Redis(port=fleet.ports.redis, db=1).keys("*")
    # A run a dead worker left Pending is crashed once stale (runtime/pending.py), not before; through the balancer.
    flow = _post(f"{fleet.api_url}/flows/", {"name": "pending-probe"})
    run = _post(f"{fleet.api_url}/flow_runs/", {"flow_id": flow["id"], "state": {"type": "PENDING"},
                                                "work_pool_name": "fleet-test", "work_queue_name": "default"})
    assert crash_stale_pending(fleet.api_url, "fleet-test") == []
    assert crash_stale_pending(fleet.api_url, "fleet-test", now=time.time() + STALE_AFTER_S + 1) == [run["id"]]
    with urllib.request.urlopen(f"{fleet.api_url}/flow_runs/{run['id']}", timeout=5) as r:
        assert json.load(r)["state"]["type"] == "CRASHED"
    # One replica down: the load balancer still answers (health-checked round robin, redispatch).
    fleet.kill("api-0")
    assert all(_get_as_prefect(f"{fleet.api_url}/health") == 200 for _ in range(6))
    time.sleep(5)  # two failed health checks 2 s apart: the dead replica is out of the rotation
    assert all(_get(f"{fleet.api_url}/health") == 200 for _ in range(6))
    # The password is in the secrets folder only: no log and no config holds it.
    password = (fleet_dir / "secrets" / "postgres-password").read_text().strip()
    assert oct((fleet_dir / "secrets").stat().st_mode & 0o777) == "0o700"
    texts = [p for p in fleet_dir.rglob("*") if p.is_file() and "secrets" not in p.parts and p.stat().st_size < 5e6]
    assert not [p for p in texts if password in p.read_text(errors="replace")]
    assert password not in json.dumps(fleet_mod.status(fleet_dir))
    tree = [pid for p in started.values() if p is not None for pid in [p.pid, *descendants(p.pid)]]
    assert len(tree) > len(started)  # the workers' preloaded processes, PostgreSQL's backends
    assert "api-0" not in down(fleet_dir)  # already dead: not counted as stopped
    assert not any(Fleet.load(fleet_dir).running().values())
    alive = [pid for pid in tree if Path(f"/proc/{pid}").exists()
             and (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z")]
    assert alive == []


def test_a_missing_binary_names_its_debian_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(fleet_mod.shutil, "which", lambda _: None)
    monkeypatch.setattr(fleet_mod, "SYSTEM_BIN", (tmp_path,))
    with pytest.raises(ConnectorError, match="apt-get install redis-server"):
        up(tmp_path / "fleet")
    assert not (tmp_path / "fleet" / "run").exists()  # nothing started


def test_a_benchmark_stopped_with_sigterm_stops_the_fleet_it_started(fleet_dir: Path) -> None:
    # `kill` (SIGTERM) of `daedalus bench fleet` in its warm-up used to end it at once, leaving its eight processes
    # running for good; Ctrl-C did not.
    size = fleet_dir / "jobs-1"
    bench = subprocess.Popen([DAEDALUS, "bench", "fleet", "--jobs", "1", "--minutes", "1", "--warmup", "5",
                              "--keep", str(fleet_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert bench.stdout is not None
        seen = []
        for line in bench.stdout:
            seen.append(line)
            if "warming up" in line:
                break
        assert any(Fleet.load(size).running().values()), "".join(seen)
        bench.send_signal(signal.SIGTERM)
        bench.communicate(timeout=120)
        assert bench.returncode == 128 + signal.SIGTERM
        assert not any(Fleet.load(size).running().values())
    finally:
        bench.kill()
        if (size / "fleet.json").exists():
            down(size)


def test_a_port_taken_after_it_was_chosen_is_chosen_anew(fleet_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The API replicas start tens of seconds after `up` chose their ports (PostgreSQL and the migrations come first);
    # a replica once found its port taken by another process meanwhile and `up` failed ("api-0 exited while
    # starting", Errno 98). Here another process holds the ports chosen for api-0 and the balancer.
    held = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    taken = [s.getsockname()[1] for s in held]
    chosen = fleet_mod.free_ports
    calls = []

    def first_chooses_taken_ports(n: int) -> list[int]:
        ports = chosen(n)
        calls.append(n)
        if len(calls) == 1:  # postgres, redis, lb, api-0, api-1
            ports[2], ports[3] = taken
        return ports

    monkeypatch.setattr(fleet_mod, "free_ports", first_chooses_taken_ports)
    try:
        fleet = up(fleet_dir, pool="fleet-ports", workers=1)
        assert fleet.ports.lb != taken[0] and fleet.ports.api[0] != taken[1]
        assert Fleet.load(fleet_dir).ports == fleet.ports  # what `down` and the benchmarks read
        for name in ("lb", "api-0"):
            assert "already in use" in fleet.log(name).read_text().lower()
        assert _get(f"{fleet.api_url}/health") == 200
        # The replicas were restarted once the balancer moved: the UI they serve names its new address.
        for port in fleet.ports.api:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui-settings", timeout=5) as r:
                assert json.load(r)["api_url"] == fleet.api_url
        assert fleet._registered("worker-0")
    finally:
        for s in held:
            s.close()
