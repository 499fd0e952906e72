"""A fleet on Prefect's own distributed path, as real processes on this machine (`daedalus fleet up/down`).

Prefect's guide to scaling a self-hosted server ("How to scale self-hosted Prefect") names the parts: PostgreSQL
for state, Redis for events, ordering, concurrency leases and the services' docket, several API servers started
with `--no-services` behind one load balancer that checks `/api/health`, one process running the loop services
(`prefect server services start`), and migrations run once before the API servers start (they start with
`PREFECT_API_DATABASE_MIGRATE_ON_START=false`, so two replicas never migrate at once). This module starts exactly
that, on loopback ports, in one folder:

    D/fleet.json          ports, the API URL, the pool (no secret)
    D/secrets/            the PostgreSQL password and the connection URL (mode 0600; never printed)
    D/run/NAME.pid        one per process started: pid and its kernel start time (a recycled pid is never signalled)
    D/logs/NAME.log       one per process
    D/postgres, D/redis, D/haproxy.cfg, D/prefect/NAME (each part's PREFECT_HOME)

Processes: `postgres`, `redis`, `api-0`, `api-1` (the replicas), `lb` (HAProxy), `services`, `worker-0`, `worker-1`
(`daedalus worker`, one work pool). Each runs in a session of its own so that `down`, and the fault injector of
`daedalus bench chaos`, stop a part and everything under it, and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from daedalus.models.errors import ConnectorError
from daedalus.runtime.local_prefect import LocalPostgres, server_settings, start_postgres
from daedalus.runtime.ports import free_port, free_ports
from daedalus.runtime.prefork import stop_timeout

API_REPLICAS = 2
WORKERS = 2
POOL = "fleet"
# A worker starts at most WORKER_LIMIT runs in flight and polls every POLL_S (bench/schedule.py says why).
WORKER_LIMIT = 30
POLL_S = 3.0
# A run whose worker died (SIGKILL, a lost node) stays Running for ever and holds its deployment's one slot, so its
# job's later runs are cancelled (CANCEL_NEW). Prefect's answer ("How to detect and respond to zombie flows"):
# runs send a heartbeat every HEARTBEAT_S and an automation marks a run Crashed when none came for ZOMBIE_AFTER_S;
# a run claimed (Pending) by a worker that died before starting it is crashed the same way after PENDING_AFTER_S.
HEARTBEAT_S = 30
ZOMBIE_AFTER_S = 75  # two heartbeats and a half
PENDING_AFTER_S = 90
# A run whose worker died before starting it stays Pending and holds its job's slot until the slot's lease expires
# (Prefect's default 300 s): a minute here, which a started run never notices (its engine renews the lease itself).
# `daedalus worker` then crashes the Pending run (runtime/pending.py).
LEASE_S = 60
STOP_GRACE_S = 15.0  # SIGTERM, then this long, then SIGKILL (a worker gets its own stop timeout on top)
START_TIMEOUT_S = 180.0
PORT_MOVES = 3  # a process whose port was taken since it was chosen is given a new one this many times
APT = {"redis-server": "redis-server", "haproxy": "haproxy"}  # binary → Debian package
SYSTEM_BIN = (Path("/usr/sbin"), Path("/usr/bin"))  # where Debian puts them when PATH lacks sbin (a plain user)


# The workers and their runs: poll often, send heartbeats, and retry a 500 as Prefect retries a 503 (the API
# answers 500 while PostgreSQL restarts: a run must not crash, nor a crash go unrecorded, over a few seconds).
WORKER_SETTINGS = {"PREFECT_WORKER_QUERY_SECONDS": f"{POLL_S:g}", "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S),
                   "PREFECT_CLIENT_RETRY_EXTRA_CODES": "500",
                   # the fleet's API runs without CSRF protection (Prefect's default), so a client's token request
                   # only fails: one wasted request (and the server's 422) for each client each run opens
                   "PREFECT_CLIENT_CSRF_SUPPORT_ENABLED": "false"}


def redis_settings(port: int) -> dict[str, str]:
    """Prefect's Redis-backed implementations (prefect-redis) for every part of the server, as the guide lists them:
    the event broker and cache, causal ordering of events, concurrency-lease storage (all on database 0), and the
    docket that hands the loop services their work (database 1, kept apart as the guide suggests)."""
    return {
        "PREFECT_MESSAGING_BROKER": "prefect_redis.messaging",
        "PREFECT_MESSAGING_CACHE": "prefect_redis.messaging",
        "PREFECT_SERVER_EVENTS_CAUSAL_ORDERING": "prefect_redis.ordering",
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect_redis.lease_storage",
        "PREFECT_REDIS_MESSAGING_HOST": "127.0.0.1",
        "PREFECT_REDIS_MESSAGING_PORT": str(port),
        "PREFECT_REDIS_MESSAGING_DB": "0",
        "PREFECT_SERVER_DOCKET_URL": f"redis://127.0.0.1:{port}/1",
    }


class PortTaken(ConnectorError):
    """A process exited on start because another process had taken the port chosen for it."""


@dataclass
class Ports:
    postgres: int
    redis: int
    lb: int
    api: list[int]


@dataclass
class Process:
    """One process the fleet started: its pid and kernel start time (field 22 of /proc/PID/stat)."""

    name: str
    pid: int
    started: int

    def alive(self) -> bool:
        return _start_time(self.pid) == self.started


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks, None when it is gone (or a zombie)."""
    fields = _stat(pid)
    if fields is None or fields[0] == "Z":
        return None
    return int(fields[19])


def descendants(pid: int) -> list[int]:
    """Every live process under `pid`, children of other sessions included (a worker's preloaded process and its
    runs run in sessions of their own)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found += [int(child), *descendants(int(child))]
    return found


def kind_of(name: str) -> str:
    """`api-1` → `api`: the process kind a cost is counted under."""
    return name.split("-")[0]


@dataclass
class Fleet:
    """A fleet started by `up` in `folder`; `Fleet.load(folder)` reads it back in another process."""

    folder: Path
    ports: Ports
    pool: str = POOL
    workers: int = WORKERS
    worker_limit: int = WORKER_LIMIT
    _popen: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)
    _log_from: dict[str, int] = field(default_factory=dict, repr=False)  # each log's size when its process started

    # --- where things are -------------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        """The one address clients use: the load balancer in front of the replicas."""
        return f"http://127.0.0.1:{self.ports.lb}/api"

    @property
    def names(self) -> list[str]:
        """Every process, in start order (stopped in the reverse)."""
        return ["postgres", "redis", *(f"api-{i}" for i in range(len(self.ports.api))), "lb", "services",
                *(f"worker-{i}" for i in range(self.workers))]

    def log(self, name: str) -> Path:
        """The process's log; PostgreSQL's is written by pg_ctl, as the `postgres` user, in its own folder."""
        return self.postgres_folder / "postgres.log" if name == "postgres" else self.folder / "logs" / f"{name}.log"

    @property
    def postgres_folder(self) -> Path:
        return self.folder / "postgres"

    def pid_file(self, name: str) -> Path:
        return self.folder / "run" / f"{name}.pid"

    def home(self, name: str) -> Path:
        return self.folder / "prefect" / name

    @property
    def postgres(self) -> LocalPostgres:
        password = (self.folder / "secrets" / "postgres-password").read_text().strip()
        return LocalPostgres(self.postgres_folder, self.ports.postgres, password, throwaway=False)

    @classmethod
    def load(cls, folder: Path) -> Fleet:
        try:
            doc = json.loads((folder / "fleet.json").read_text())
        except (OSError, ValueError) as exc:
            raise ConnectorError(f"{folder} holds no fleet (no readable fleet.json): {exc}") from exc
        return cls(folder, Ports(**doc["ports"]), doc["pool"], doc["workers"], doc["worker_limit"])

    def save(self) -> None:
        doc = {"api_url": self.api_url, "ports": asdict(self.ports), "pool": self.pool, "workers": self.workers,
               "worker_limit": self.worker_limit}
        (self.folder / "fleet.json").write_text(json.dumps(doc, indent=2))

    # --- environments ---------------------------------------------------------------------------------

    def client_env(self, home: Path | None = None) -> dict[str, str]:
        """For clients of the fleet (workers, `daedalus deploy`, the benchmarks): the load balancer's URL."""
        home = home or self.home("client")
        env = {**os.environ, "PREFECT_API_URL": self.api_url, "PREFECT_HOME": str(home),
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DAEDALUS_SETTINGS": str(home / "daedalus.toml")}
        for key in ("PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_REDIS_MESSAGING_PASSWORD"):
            env.pop(key, None)  # nothing of the server's secrets reaches a flow run
        return env

    def server_env(self, name: str) -> dict[str, str]:
        """For the API replicas, the services process and the migration: PostgreSQL, Redis, the settings of
        runtime/local_prefect.py for many one-minute deployments, no migration on start."""
        env = {**os.environ, "PREFECT_HOME": str(self.home(name)), **server_settings(many_deployments=True),
               **redis_settings(self.ports.redis),
               "PREFECT_API_DATABASE_CONNECTION_URL": self.postgres.url,
               "PREFECT_API_DATABASE_MIGRATE_ON_START": "false",
               "PREFECT_SERVER_CONCURRENCY_INITIAL_DEPLOYMENT_LEASE_DURATION": str(LEASE_S),
               "PREFECT_UI_API_URL": self.api_url}
        env.pop("PREFECT_API_URL", None)
        return env

    # --- one part ---------------------------------------------------------------------------------------

    def process(self, name: str) -> Process | None:
        """The recorded process `name`, if its pid file exists."""
        try:
            pid, started = self.pid_file(name).read_text().split()
        except (OSError, ValueError):
            return None
        return Process(name, int(pid), int(started))

    def _record(self, name: str, pid: int) -> Process:
        started = _start_time(pid)
        if started is None:
            raise self._exited(name, "exited at once")
        self.pid_file(name).write_text(f"{pid} {started}\n")
        return Process(name, pid, started)

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> Process:
        self.home(name).mkdir(parents=True, exist_ok=True)
        with open(self.log(name), "ab") as out:
            self._log_from[name] = out.tell()
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.folder)
        self._popen[name] = proc
        return self._record(name, proc.pid)

    def start(self, name: str) -> Process:
        """Start (or restart) the process `name` as `up` does, without waiting for it to serve."""
        kind = kind_of(name)
        if kind == "postgres":
            pg = self.postgres
            pg.start()
            return self._record(name, pg.pid)
        if kind == "redis":
            return self._spawn(name, [_binary("redis-server"), str(self.folder / "redis" / "redis.conf")],
                               dict(os.environ))
        if kind == "lb":
            return self._spawn(name, [_binary("haproxy"), "-db", "-f", str(self.folder / "haproxy.cfg")],
                               dict(os.environ))
        if kind == "api":
            port = self.ports.api[int(name.split("-")[1])]
            return self._spawn(name, [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                      "--port", str(port), "--no-services"], self.server_env(name))
        if kind == "services":
            return self._spawn(name, [sys.executable, "-m", "prefect", "server", "services", "start"],
                               self.server_env(name))
        if kind == "worker":
            env = {**self.client_env(self.home(name)), **WORKER_SETTINGS}  # the runs inherit them
            return self._spawn(name, [str(Path(sys.executable).parent / "daedalus"), "worker", "--pool", self.pool,
                                      "--limit", str(self.worker_limit)], env)
        raise ValueError(f"no fleet process {name!r}")

    def kill(self, name: str) -> None:
        """SIGKILL the process `name` and everything under it, at once: a crash, nothing gets to clean up."""
        found = self.process(name)
        if found is None or not found.alive():
            return
        for pid in [found.pid, *descendants(found.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._reap(name, found, 10.0)

    def stop(self, name: str) -> bool:
        """SIGTERM the process `name` (PostgreSQL: `pg_ctl stop -m fast`), wait, then SIGKILL it and anything it
        left under it. True when something was running."""
        found = self.process(name)
        if found is None or not found.alive():
            self.pid_file(name).unlink(missing_ok=True)
            return False
        under = descendants(found.pid)
        grace_s = stop_timeout() + 5.0 if kind_of(name) == "worker" else STOP_GRACE_S
        if kind_of(name) == "postgres":
            subprocess.run(_postgres_stop(self.postgres), capture_output=True, timeout=60)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(found.pid, signal.SIGTERM)  # its own session (start_new_session)
        if not self._reap(name, found, grace_s):
            for pid in [found.pid, *under, *descendants(found.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._reap(name, found, 10.0)
        for pid in under:  # a run or a backend that outlived its parent
            start = _start_time(pid)
            if start is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.pid_file(name).unlink(missing_ok=True)
        return True

    def _reap(self, name: str, found: Process, timeout_s: float) -> bool:
        """Wait until the process is gone (reaped when this process started it); True if it went in time."""
        deadline = time.monotonic() + timeout_s
        proc = self._popen.get(name)
        while time.monotonic() < deadline:
            if proc is not None and proc.pid == found.pid:
                proc.poll()
            if not found.alive():
                return True
            time.sleep(0.1)
        return False

    # --- readiness ------------------------------------------------------------------------------------------

    def wait_ready(self, name: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until `name` serves: PostgreSQL accepts connections (pg_ctl -w did that), Redis answers PING, a replica
        and the load balancer answer /api/health, a worker has registered with the pool; the services process has
        no endpoint: it must be alive."""
        kind = kind_of(name)
        checks: dict[str, Callable[[], bool]] = {
            "postgres": lambda: True,
            "redis": lambda: _redis_ping(self.ports.redis),
            "api": lambda: _healthy(f"http://127.0.0.1:{self.ports.api[int(name.split('-')[1])]}/api/health"),
            # Through every replica in turn (round robin): one answer proves only the first is behind it.
            "lb": lambda: all(_healthy(f"{self.api_url}/health") for _ in range(2 * len(self.ports.api))),
            "services": lambda: True,
            "worker": lambda: self._registered(name),
        }
        found = self.process(name)

        def ready() -> bool:
            if found is None or not found.alive():
                raise self._exited(name, "exited while starting")
            return checks[kind]()

        try:
            Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(0.5), retry=retry_if_result(lambda ok: not ok)
                     )(ready)
        except RetryError:
            raise ConnectorError(f"{name} did not serve within {timeout_s:.0f} s; see {self.log(name)}") from None

    def _exited(self, name: str, what: str) -> ConnectorError:
        """The error for a process that died on start: PortTaken when its log, since it started, says so (the
        words of Prefect, uvicorn, HAProxy and Redis alike)."""
        try:
            with open(self.log(name), "rb") as f:
                f.seek(self._log_from.get(name, 0))
                taken = b"already in use" in f.read().lower()
        except OSError:
            taken = False
        kind = PortTaken if taken else ConnectorError
        return kind(f"{name} {what}{' (its port was taken)' if taken else ''}; see {self.log(name)}")

    def serve(self, name: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start `name` and wait until it serves. A port another process took since it was chosen is chosen anew,
        up to PORT_MOVES times, and the running processes that name it are restarted once it serves (see `_move`)."""
        named_by: list[str] = []
        for moves in range(PORT_MOVES + 1):
            try:
                self.start(name)
                self.wait_ready(name, timeout_s)
                break
            except PortTaken:
                if moves == PORT_MOVES:
                    raise
                named_by = self._move(name)
        for other in [n for n in named_by if self.running()[n]]:
            self.stop(other)
            self.serve(other, timeout_s)

    def _move(self, name: str) -> list[str]:
        """A new port for `name`, written to fleet.json and the configs; the processes that name it, to restart: the
        balancer for a replica, the replicas and the services for Redis, the replicas for the balancer (the UI they
        serve names its address); never a worker, whose runs would die with it."""
        kind = kind_of(name)
        port = free_port(avoid={self.ports.postgres, self.ports.redis, self.ports.lb, *self.ports.api})
        replicas = [f"api-{i}" for i in range(len(self.ports.api))]
        if kind == "api":
            self.ports.api[int(name.split("-")[1])], named_by = port, ["lb"]
        elif kind == "redis":
            self.ports.redis, named_by = port, [*replicas, "services"]
        elif kind == "lb":
            if any(self.running()[f"worker-{i}"] for i in range(self.workers)):
                raise PortTaken(f"{name}'s port was taken and the workers, which name it, are running; "
                                f"see {self.log(name)}")
            self.ports.lb, named_by = port, replicas
        else:
            raise ConnectorError(f"{name}'s port was taken and cannot be moved; see {self.log(name)}")
        self.save()
        _write_configs(self)
        return named_by

    def _registered(self, name: str) -> bool:
        """The worker's Prefect worker has sent a heartbeat to the pool (named after its `daedalus worker` pid)."""
        found = self.process(name)
        if found is None:
            return False
        wanted = f"-{found.pid}"
        body = json.dumps({"limit": 200}).encode()
        req = urllib.request.Request(f"{self.api_url}/work_pools/{self.pool}/workers/filter", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                workers = json.load(r)
        except OSError:
            return False
        return any(str(w.get("name", "")).endswith(wanted) for w in workers)

    def running(self) -> dict[str, bool]:
        return {name: (p := self.process(name)) is not None and p.alive() for name in self.names}


def _binary(name: str) -> str:
    found = shutil.which(name) or next((str(d / name) for d in SYSTEM_BIN if (d / name).exists()), None)
    if found is None:
        raise ConnectorError(f"{name} is not installed: apt-get install {APT[name]} (scripts/system-deps.sh)")
    return found


def _postgres_stop(pg: LocalPostgres, mode: str = "fast") -> list[str]:
    from daedalus.runtime.local_prefect import _as_postgres, _pg_bin

    return _as_postgres(_pg_bin("pg_ctl"), "-D", str(pg.data), "stop", "-m", mode, "-w")


def postgres_crash(fleet: Fleet) -> None:
    """`pg_ctl stop -m immediate`: PostgreSQL's crash (no shutdown checkpoint; the next start replays the WAL)."""
    subprocess.run(_postgres_stop(fleet.postgres, "immediate"), capture_output=True, timeout=60)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status == 200
    except OSError:
        return False


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _traversable_by_postgres(folder: Path) -> None:
    """As root the cluster runs as `postgres`, which must reach its folder through every parent."""
    if os.geteuid() != 0:
        return
    done = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(folder)], capture_output=True)
    if done.returncode:
        raise ConnectorError(f"the `postgres` user cannot reach {folder}: give its parent folders o+x "
                             "(e.g. a folder under /tmp made with mode 755)")


def _write_configs(fleet: Fleet) -> None:
    d = fleet.folder
    (d / "redis").mkdir(exist_ok=True)
    # Append-only file: Redis killed and restarted keeps what Prefect had queued in its streams.
    (d / "redis" / "redis.conf").write_text("\n".join([
        "bind 127.0.0.1", f"port {fleet.ports.redis}", "protected-mode yes", "daemonize no", f"dir {d / 'redis'}",
        'logfile ""', 'save ""', "appendonly yes", "appendfsync everysec", ""]))
    servers = "\n".join(f"  server api-{i} 127.0.0.1:{port} check" for i, port in enumerate(fleet.ports.api))
    # Round robin over the replicas; a replica fails its health check within ~4 s and a request that could not
    # connect is retried on the other (redispatch). Long timeouts: clients hold websockets (events) open.
    (d / "haproxy.cfg").write_text(f"""global
  log stdout format raw local0 notice
  maxconn 4000
defaults
  mode http
  log global
  option dontlog-normal
  timeout connect 2s
  timeout client 300s
  timeout server 300s
  timeout tunnel 1h
  retries 3
  option redispatch
frontend prefect_api
  bind 127.0.0.1:{fleet.ports.lb}
  default_backend prefect_replicas
backend prefect_replicas
  balance roundrobin
  option httpchk GET /api/health
  http-check expect status 200
  default-server inter 2s fall 2 rise 1
{servers}
""")


def up(folder: Path, pool: str = POOL, workers: int = WORKERS, replicas: int = API_REPLICAS,
       worker_limit: int = WORKER_LIMIT, timeout_s: float = START_TIMEOUT_S,
       on_progress: Callable[[str], None] | None = None) -> Fleet:
    """Start the whole fleet in `folder` and return once every part serves; stop what started on any failure."""
    folder = folder.resolve()
    if (folder / "fleet.json").exists() and any(Fleet.load(folder).running().values()):
        raise ConnectorError(f"a fleet is already running in {folder}: `daedalus fleet down --dir {folder}` first")
    for binary in APT:
        _binary(binary)  # a clear error before anything starts
    for sub in ("run", "logs", "secrets", "prefect"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(folder / "secrets", 0o700)
    _traversable_by_postgres(folder)
    p = free_ports(3 + replicas)
    fleet = Fleet(folder, Ports(postgres=p[0], redis=p[1], lb=p[2], api=p[3:]), pool, workers, worker_limit)
    password_file = folder / "secrets" / "postgres-password"
    if not password_file.exists():
        password_file.write_text(secrets.token_urlsafe(24))
        os.chmod(password_file, 0o600)
    fleet.save()
    _write_configs(fleet)
    say = on_progress or (lambda _: None)
    try:
        say("postgres")
        pg = start_postgres(fleet.postgres_folder, password_file.read_text().strip(), fleet.ports.postgres)
        fleet._record("postgres", pg.pid)
        for name in fleet.names[1:]:
            if name == "api-0":
                say("migrations")
                _migrate(fleet)
            say(name)
            fleet.serve(name, timeout_s)
            if name == "lb":
                ensure_automations(fleet.api_url)
    except BaseException:
        down(folder)
        raise
    return fleet


def zombie_automations() -> list[dict[str, Any]]:
    """The two automations that crash runs left behind by a dead worker (see HEARTBEAT_S), as API bodies."""
    from datetime import timedelta

    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    ends = {f"prefect.flow-run.{s}" for s in ("Completed", "Failed", "Cancelled", "Crashed")}
    cases = [("daedalus: crash runs without heartbeat", "prefect.flow-run.heartbeat",
              {"prefect.flow-run.heartbeat", *ends}, ZOMBIE_AFTER_S),
             ("daedalus: crash runs stuck in Pending", "prefect.flow-run.Pending",
              {"prefect.flow-run.Running", *ends}, PENDING_AFTER_S)]
    return [AutomationCore(
        name=name, description="Marks a flow run Crashed when its worker died (runtime/fleet.py)",
        trigger=EventTrigger(after={after}, expect=expect,
                             match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
                             for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
                             within=timedelta(seconds=within)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, message=f"{name}: its worker is gone")],
    ).model_dump(mode="json") for name, after, expect, within in cases]


def ensure_automations(api_url: str) -> None:
    """Create the zombie automations unless the server has them (by name)."""
    def call(path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(f"{api_url}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    have = {a["name"] for a in call("/automations/filter", {"limit": 200})}
    for body in zombie_automations():
        if body["name"] not in have:
            call("/automations/", body)


def _migrate(fleet: Fleet) -> None:
    """`prefect server database upgrade -y`, once, before any replica starts (they do not migrate)."""
    with open(fleet.log("migrate"), "ab") as out:
        done = subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"],
                              env=fleet.server_env("migrate"), stdout=out, stderr=subprocess.STDOUT, timeout=600)
    if done.returncode:
        raise ConnectorError(f"the database migration failed; see {fleet.log('migrate')}")


def down(folder: Path) -> list[str]:
    """Stop every process the fleet in `folder` started, newest first; the names of those that were running."""
    folder = folder.resolve()
    fleet = Fleet.load(folder)
    stopped = [name for name in reversed(fleet.names) if fleet.stop(name)]
    leftover = [name for name, alive in fleet.running().items() if alive]
    if leftover:
        raise ConnectorError(f"still running after stop: {', '.join(leftover)}")
    return stopped


def status(folder: Path) -> dict[str, Any]:
    """What `fleet status` prints: the API URL and each process, running or not."""
    fleet = Fleet.load(folder.resolve())
    return {"api_url": fleet.api_url, "pool": fleet.pool,
            "processes": {name: {"running": alive, "log": str(fleet.log(name)),
                                 "pid": (p := fleet.process(name)) and p.pid}
                          for name, alive in fleet.running().items()}}


