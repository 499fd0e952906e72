"""A Prefect server and process workers started on this machine, for the tests and `daedalus bench`.

The server runs on a loopback port with its own PREFECT_HOME (SQLite), analytics off; everything started here
runs in its own process group and is stopped by that group's id. `daedalus worker` gets its stop timeout to stop
its own parts (they run in sessions of their own) before its group is killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from daedalus.models.errors import ConnectorError
from daedalus.runtime.ports import free_port
from daedalus.runtime.prefork import stop_timeout

# Prefect 3.8.8's scheduler inserts runs with an ORM bulk insert that SQLAlchemy 2.1 refuses ("Can't evaluate
# bulk DML statement"): with it, deployments get no scheduled runs at all.
SCHEDULER_BROKEN = "Can't evaluate bulk DML statement"
STOP_GRACE_S = 15.0  # for the server or a plain worker to exit on SIGTERM before its group is killed

BATCHED_WRITES = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_READ_BATCH_SIZE": "100",
}


# Every schedule the server reads is validated against `zoneinfo.available_timezones()`, which opens each of the
# ~600 files under /usr/share/zoneinfo: a tenth of the server's CPU with 20 one-minute jobs (py-spy). An empty
# time-zone search path makes zoneinfo read the list from the `tzdata` package (one file, ten times cheaper).
ZONES_FROM_TZDATA = {"PYTHONTZPATH": ""}


def server_settings(many_deployments: bool = False) -> dict[str, str]:
    """Server settings: task-run states and events written to SQLite in batches (half the server's CPU per loop
    run); with many one-minute deployments, runs scheduled 10 minutes ahead instead of an hour."""
    env = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", **BATCHED_WRITES, **ZONES_FROM_TZDATA}
    if many_deployments:
        env["PREFECT_SERVER_SERVICES_SCHEDULER_MIN_SCHEDULED_TIME"] = "PT10M"
        env["PREFECT_SERVER_SERVICES_SCHEDULER_MIN_RUNS"] = "3"
    return env


@dataclass
class LocalPrefect:
    """A running local Prefect server, and the workers started against it."""

    home: Path
    port: int
    server: subprocess.Popen
    log: Path
    workers: list[tuple[subprocess.Popen, float]] = field(default_factory=list)  # each with the seconds it may stop in

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment for clients of this server (CLI, workers, flows)."""
        return {**os.environ, "PREFECT_HOME": str(self.home), "PREFECT_API_URL": self.api_url,
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "DAEDALUS_SETTINGS": str(self.home / "daedalus.toml")}  # what `daedalus deploy` writes, per server

    def start_worker(self, pool: str, prefork: bool = False, name: str = "worker",
                     env: dict[str, str] | None = None, limit: int | None = None) -> subprocess.Popen:
        """A process worker for `pool` (through `daedalus worker` when `prefork`), logging next to the server's."""
        log = open(self.home / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        cmd = ([str(Path(sys.executable).parent / "daedalus"), "worker", "--pool", pool] if prefork else
               [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"])
        cmd += ["--limit", str(limit)] if limit else []
        env = {**self.env(), **(env or {})}
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.workers.append((proc, stop_timeout(env) + 5.0 if prefork else STOP_GRACE_S))
        return proc

    def scheduler_errors(self) -> list[str]:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return [line for line in text.splitlines() if SCHEDULER_BROKEN in line]

    def stop(self) -> None:
        for proc, grace_s in [*self.workers, (self.server, STOP_GRACE_S)]:
            _stop_group(proc, grace_s)
        self.workers.clear()


def _stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # the group this module started (start_new_session)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass


def start_server(home: Path, port: int | None = None, timeout_s: float = 120.0, many_deployments: bool = False,
                 database_url: str | None = None) -> LocalPrefect:
    """Start `prefect server start` on 127.0.0.1 (SQLite in `home`, or `database_url`), wait for /api/health."""
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = home / "server.log"
    env = {**os.environ, "PREFECT_HOME": str(home), **server_settings(many_deployments),
           "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api"}  # the UI's API is this server, not :4200
    env.pop("PREFECT_API_URL", None)
    if database_url:
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    local = LocalPrefect(home, port, proc, log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConnectorError(f"the Prefect server exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"{local.api_url}/health", timeout=2) as r:
                if r.status == 200:
                    return local
        except OSError:
            time.sleep(0.5)
    local.stop()
    raise ConnectorError(f"the Prefect server did not answer within {timeout_s:.0f} s; see {log}")


@dataclass
class LocalPostgres:
    """A PostgreSQL cluster on a loopback port (run as the `postgres` user): throwaway for a benchmark's server with
    many jobs, or kept in a fleet's folder (`daedalus fleet up`), where it needs a password."""

    folder: Path
    port: int
    password: str | None = None  # None: trust authentication on 127.0.0.1 (a benchmark's throwaway cluster)
    throwaway: bool = True  # `stop` removes the folder

    @property
    def url(self) -> str:
        """The server's connection URL; it holds the password: never print it."""
        user = "postgres" if self.password is None else f"postgres:{quote(self.password, safe='')}"
        return f"postgresql+asyncpg://{user}@127.0.0.1:{self.port}/prefect"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def log(self) -> Path:
        return self.folder / "postgres.log"

    @property
    def pid(self) -> int:
        """The postmaster: the backends serving the server are its children."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def start(self) -> None:
        """pg_ctl start (waits until it accepts connections): the cluster's first start, or a restart."""
        _run_pg(_as_postgres(_pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "120", "-o",
                             f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
                             "-c max_connections=200", "start"))

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop: `fast` (clients disconnected, a clean shutdown) or `immediate` (no shutdown checkpoint: a
        crash, recovered from the WAL at the next start)."""
        subprocess.run(_as_postgres(_pg_bin("pg_ctl"), "-D", str(self.data), "stop", "-m", mode),
                       capture_output=True, timeout=60)
        if self.throwaway:
            shutil.rmtree(self.folder, ignore_errors=True)


def _pg_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not found:
        raise ConnectorError(f"PostgreSQL's {name} is not installed (Debian package `postgresql`)")
    return str(found[-1])


def _as_postgres(*cmd: str) -> list[str]:
    return list(cmd) if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *cmd]


def _run_pg(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    if done.returncode:
        raise ConnectorError(f"{' '.join(cmd[:4])} failed: {done.stderr[-500:]}")


def _own_by_postgres(path: Path) -> None:
    """As root the cluster runs as `postgres`, which must own its folder."""
    import pwd

    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(path, user.pw_uid, user.pw_gid)


def start_postgres(folder: Path | None = None, password: str | None = None, port: int | None = None
                   ) -> LocalPostgres:
    """initdb + pg_ctl start + a `prefect` database, on 127.0.0.1: in a temporary folder with trust authentication
    (the default), or in `folder` with `password` (scram-sha-256; the password file is removed after initdb). A
    `folder` that already holds a cluster is started as it is."""
    throwaway = folder is None
    folder = Path(tempfile.mkdtemp(prefix="daedalus-pg-")) if folder is None else folder
    folder.mkdir(parents=True, exist_ok=True)
    _own_by_postgres(folder)
    pg = LocalPostgres(folder, port or free_port(), password, throwaway)
    try:
        if not (pg.data / "PG_VERSION").exists():
            auth = ["-A", "trust"]
            pwfile = folder / ".pwfile"
            if password is not None:
                pwfile.write_text(password)
                os.chmod(pwfile, 0o600)
                _own_by_postgres(pwfile)
                auth = ["-A", "scram-sha-256", f"--pwfile={pwfile}"]
            try:
                _run_pg(_as_postgres(_pg_bin("initdb"), "-D", str(pg.data), *auth, "-U", "postgres", "--no-sync"))
            finally:
                pwfile.unlink(missing_ok=True)
            pg.start()
            env = None if password is None else {**os.environ, "PGPASSWORD": password}
            done = subprocess.run(_as_postgres(_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(pg.port), "-U",
                                               "postgres", "prefect"), capture_output=True, text=True, timeout=60,
                                  env=env)
            if done.returncode:
                raise ConnectorError(f"createdb failed: {done.stderr[-500:]}")
        else:
            pg.start()
    except BaseException:
        if throwaway:
            pg.stop()
        raise
    return pg
