"""A real Apache Flink 2.3 on this machine: a JobManager and TaskManagers as processes we own, and the trace job.

Why it exists: the loop must be tried against the metrics a real Flink publishes and the rescales a real Flink
performs, not only against the simulator. No Kafka broker and no Kubernetes API server run on these machines
(see docs/engines.md), so the cluster is standalone, on loopback, and the workload is a trace the job's own source
replays on the wall clock (`Trace`); the same trace, exported as a Kafka broker's messages-in counter
(`TraceExporter`), is the workload the loop reads.

`LocalFlink` writes a configuration of its own (`FLINK_CONF_DIR`; nothing inside the virtual environment is
touched), starts each process with `*.sh start-foreground` in its own process group (the script execs the JVM,
so the child we hold *is* the JVM), picks every port free (REST, RPC, one Prometheus reporter port per process),
and stops every process it started, by its id, on exit — also when the block raises. Two modes:

- `session`: adaptive scheduler, `max_taskmanagers` TaskManagers of one slot each; jobs are submitted through
  REST and rescaled with `PUT /jobs/:id/resource-requirements` (scale target `flink-rest`);
- `reactive`: an application cluster running the trace job with `scheduler-mode: reactive`; the job's
  parallelism follows the TaskManager processes, which a supervisor thread starts and stops on request
  (`control.json` → `state.json` in the cluster folder; scale target `flink-reactive`).

The job (`runtime/flink_job/*.java`) is compiled with javac against `$FLINK_HOME/lib/*` into a jar in a cache
folder (`job_jar`), once per source version. Flink itself comes from the `apache-flink` and
`apache-flink-libraries` wheels (scripts and jars; a Java job needs neither Beam nor PyFlink's Python side).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import requests
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from daedalus.connectors.spark_local import read_json, write_json
from daedalus.models.errors import ConfigurationError, ConnectorError
from daedalus.runtime.ports import free_ports

FLINK_VERSION = "2.3.0"
JOB_CLASS = "daedalus.flink.TraceJob"
JOB_SOURCES = Path(__file__).with_name("flink_job")
INSTALL_HINT = (f"pip install --no-deps apache-flink=={FLINK_VERSION} apache-flink-libraries=={FLINK_VERSION} "
                "(the scripts and jars; a Java job needs nothing else) and a JDK 17 (apt-get install "
                "openjdk-17-jdk-headless)")
# Java 17 closes the JDK internals Flink's serializers reach into; Flink's own default configuration opens them.
JAVA_OPTS = " ".join([
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    *(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
        "java.lang", "java.net", "java.io", "java.nio", "sun.nio.ch", "java.lang.reflect", "java.text", "java.time",
        "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "java.util.concurrent.locks")),
])
Mode = Literal["session", "reactive"]


# --- where Flink and Java are -------------------------------------------------------------------------------

def flink_home() -> Path:
    """`$FLINK_HOME`, else the `pyflink` folder of the installed wheels (found without importing PyFlink)."""
    env = os.environ.get("FLINK_HOME")
    if env:
        home = Path(env)
    else:
        spec = importlib.util.find_spec("pyflink")
        if spec is None or not spec.submodule_search_locations:
            raise ConfigurationError(f"Flink is not installed: {INSTALL_HINT}")
        home = Path(next(iter(spec.submodule_search_locations)))
    if not (home / "bin" / "jobmanager.sh").is_file() or not list((home / "lib").glob("flink-dist-*.jar")):
        raise ConfigurationError(f"{home} holds no Flink distribution (bin/jobmanager.sh, lib/flink-dist-*.jar): "
                                 f"{INSTALL_HINT}")
    return home


def java_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ConfigurationError(f"`{name}` not found: {INSTALL_HINT}")
    return path


def cache_dir() -> Path:
    """Where built artefacts live: `$DAEDALUS_CACHE`, else `$XDG_CACHE_HOME/daedalus`, else `~/.cache/daedalus`."""
    if os.environ.get("DAEDALUS_CACHE"):
        return Path(os.environ["DAEDALUS_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "daedalus"


def job_jar(cache: Path | None = None, home: Path | None = None) -> Path:
    """The trace job's jar, compiled with javac against `$FLINK_HOME/lib/*` on first use and cached by the hash
    of its sources and the Flink version (a changed source builds a new jar; nothing built is committed)."""
    home = home or flink_home()
    sources = sorted(JOB_SOURCES.glob("*.java"))
    if not sources:
        raise ConfigurationError(f"no Java sources in {JOB_SOURCES}")
    digest = hashlib.sha256(FLINK_VERSION.encode())
    for src in sources:
        digest.update(src.name.encode() + b"\0" + src.read_bytes())
    folder = (cache or cache_dir()) / "flink"
    jar = folder / f"daedalus-trace-job-{digest.hexdigest()[:16]}.jar"
    if jar.is_file():
        return jar
    folder.mkdir(parents=True, exist_ok=True)
    build = folder / f"build-{os.getpid()}"
    shutil.rmtree(build, ignore_errors=True)
    classes = build / "classes"
    classes.mkdir(parents=True)
    done = subprocess.run([java_tool("javac"), "-nowarn", "--release", "17", "-cp", str(home / "lib" / "*"), "-d",
                           str(classes), *map(str, sources)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise ConfigurationError(f"javac failed on {JOB_SOURCES}:\n{done.stderr[-3000:]}")
    tmp = build / "job.jar"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("META-INF/MANIFEST.MF", f"Manifest-Version: 1.0\nMain-Class: {JOB_CLASS}\n")
        for path in sorted(classes.rglob("*.class")):
            z.write(path, path.relative_to(classes).as_posix())
    os.replace(tmp, jar)  # atomic: a concurrent build never leaves half a jar
    shutil.rmtree(build, ignore_errors=True)
    return jar


# --- the workload ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Trace:
    """Whole records per second from `start_ms` on the wall clock: the Python twin of `Trace.java`.

    `due(now_ms)` counts the records arrived by then with the same integer arithmetic as the job's source, so the
    workload exported here and the job's pending records are one function seen twice.
    """

    rates: tuple[int, ...]
    start_ms: int

    @classmethod
    def of(cls, rates: Sequence[float], start_ms: int) -> Trace:
        if any(r < 0 for r in rates):
            raise ValueError("a trace's rates are records per second, ≥ 0")
        return cls(tuple(round(r) for r in rates), int(start_ms))

    @property
    def total(self) -> int:
        return sum(self.rates)

    @property
    def end_ms(self) -> int:
        return self.start_ms + 1000 * len(self.rates)

    def due(self, now_ms: int) -> int:
        elapsed = now_ms - self.start_ms
        if elapsed <= 0:
            return 0
        second = min(elapsed // 1000, len(self.rates))
        done = sum(self.rates[:second])
        if second >= len(self.rates):
            return done
        return done + self.rates[second] * (elapsed - 1000 * second) // 1000

    def rate_at(self, t: float) -> float:
        """Records per second at epoch second `t` (0 outside the trace)."""
        second = int((t * 1000 - self.start_ms) // 1000)
        return float(self.rates[second]) if 0 <= second < len(self.rates) else 0.0

    def write(self, path: Path) -> Path:
        path.write_text("\n".join(str(r) for r in self.rates) + "\n")
        return path


class TraceExporter:
    """The trace's arrivals as a Kafka broker would publish them, for Prometheus (the workload the loop reads).

    `kafka_server_brokertopicmetrics_messagesin_total{topic}` is `Trace.due` at scrape time (a counter that
    never resets: the workload is independent of the job's restarts), and `daedalus_trace_rate{topic}` the
    trace's rate now.
    """

    def __init__(self, trace: Trace | None, topic: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.trace, self.topic = trace, topic  # the trace may be set later (its start is the job's submission)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port = int(self._server.server_port)
        self.target = f"{host}:{self.port}"

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        if self.trace is None:
            return
        now = time.time()
        arrived = CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin", "records due by the trace",
                                      labels=["topic"])
        arrived.add_metric([self.topic], float(self.trace.due(int(now * 1000))))
        rate = GaugeMetricFamily("daedalus_trace_rate", "the trace's records per second now", labels=["topic"])
        rate.add_metric([self.topic], self.trace.rate_at(now))
        yield from (arrived, rate)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- the job ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TraceJob:
    """The trace job's arguments (see `TraceJob.java`)."""

    name: str
    trace_file: Path
    start_ms: int
    output: Path
    work_us: int = 1000  # CPU microseconds each record costs (the job's capacity is about 1e6 / work_us per core)
    splits: int = 12  # even shares for 1, 2, 3 and 4 readers
    keys: int = 128
    # Microseconds of wall time each record waits in a non-parallel stage `aggregate` after `work` (0: no such stage),
    # a task of its own at every parallelism: the job then processes at most about 1e6 / bottleneck_us records/s
    # however many workers it has (`bottleneck_cost`).
    bottleneck_us: int = 0

    def args(self) -> list[str]:
        return ["--trace", str(self.trace_file), "--start-ms", str(self.start_ms), "--output", str(self.output),
                "--name", self.name, "--work-us", str(self.work_us), "--splits", str(self.splits),
                "--keys", str(self.keys), "--bottleneck-us", str(self.bottleneck_us)]


BOTTLENECK_TASK = "aggregate"  # the Flink task name of `--bottleneck-us`'s stage (its operator's, never chained)


def bottleneck_cost(rate: float) -> int:
    """The wait per record (µs) that makes `aggregate` take at most `rate` records/s: 1e6 / rate, rounded up.

    The demo derives `rate` from what one worker's `work` measured on this machine at start (a share of it), so the
    stage binds below one worker on any machine instead of at a constant tuned to one box."""
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"a bottleneck's rate is records per second > 0, got {rate!r}")
    return math.ceil(1e6 / rate)


def job_graph(job: TraceJob, parallelism: int, home: Path | None = None) -> list[tuple[str, int, int]]:
    """The tasks Flink runs for `job` at `parallelism`, chaining applied: (name, parallelism, maximum parallelism) from
    the source on (`TraceJob.java --plan`; -1: no maximum set). What the scheduler and the metrics' `task_name` see."""
    home = home or flink_home()
    done = subprocess.run([java_tool("java"), *JAVA_OPTS.split(), "-cp", f"{job_jar(home=home)}:{home / 'lib'}/*",
                           JOB_CLASS, *job.args(), "--plan", str(parallelism)],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise ConfigurationError(f"the trace job's graph at parallelism {parallelism}: {done.stderr[-2000:]}")
    rows = [line.split("\t") for line in done.stdout.splitlines() if line.count("\t") == 2]
    return [(name, int(p), int(m)) for name, p, m in rows]


def committed_ids(output: Path) -> tuple[int, int]:
    """(lines, distinct ids) in the sink's committed part files; in-progress files (`.part-…`) are hidden and
    not counted: only what a completed checkpoint committed is output."""
    import numpy as np

    chunks = []
    for path in sorted(output.rglob("part-*")):
        data = path.read_bytes()
        if data:
            ids = np.loadtxt(data.decode().splitlines(), delimiter=",", usecols=0, dtype=np.int64, ndmin=1)
            chunks.append(ids)
    if not chunks:
        return 0, 0
    ids = np.concatenate(chunks)
    return int(ids.size), int(np.unique(ids).size)


# --- the cluster --------------------------------------------------------------------------------------------

@dataclass
class FlinkProcess:
    """One JVM we started: its role, slot (TaskManagers), Prometheus reporter port and log folder."""

    role: Literal["jobmanager", "taskmanager"]
    slot: int
    metrics_port: int
    log_dir: Path
    popen: subprocess.Popen[bytes]
    started: float = field(default_factory=time.time)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def rss_bytes(self) -> int:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def log_file(self) -> Path | None:
        logs = sorted(self.log_dir.glob("*.log"))
        return logs[-1] if logs else None


PrometheusFactory = Callable[[Path, Sequence[str], str], AbstractContextManager[str]]


class LocalFlink:
    """A standalone Flink cluster on loopback, owned by this process: start, submit, rescale, stop.

    Use as a context manager; `stop()` ends every JVM it started (SIGTERM to its process group, SIGKILL after
    `stop_timeout_s`), and a Prometheus started through `prometheus` (`daedalus.runtime.prometheus.
    local_prometheus`, or a test's own) scrapes the JobManager,
    every TaskManager slot (started or not) and `extra_targets`.
    """

    def __init__(self, workdir: Path, *, mode: Mode = "session", taskmanagers: int = 1, max_taskmanagers: int = 4,
                 application: TraceJob | None = None, memory: str = "1024m", checkpoint_interval_s: float = 5.0,
                 prometheus: PrometheusFactory | None = None, scrape_interval: str = "1s",
                 extra_targets: Sequence[str] = (), extra_config: dict[str, Any] | None = None,
                 stop_timeout_s: float = 30.0, start_timeout_s: float = 180.0) -> None:
        if not 1 <= taskmanagers <= max_taskmanagers:
            raise ValueError(f"taskmanagers must be within 1..{max_taskmanagers}, got {taskmanagers}")
        if mode == "reactive" and application is None:
            raise ValueError("reactive mode runs an application cluster: pass the job (`application`)")
        self.workdir = Path(workdir).resolve()
        self.mode, self.application = mode, application
        self.initial_taskmanagers, self.max_taskmanagers = taskmanagers, max_taskmanagers
        self.memory, self.checkpoint_interval_s = memory, checkpoint_interval_s
        self.stop_timeout_s, self.start_timeout_s = stop_timeout_s, start_timeout_s
        self._prometheus_factory, self.scrape_interval = prometheus, scrape_interval
        self.extra_targets = list(extra_targets)
        self.extra_config = dict(extra_config or {})
        self.home = flink_home()
        java_tool("java")
        ports = free_ports(3 + max_taskmanagers)
        self.rest_port, self.rpc_port = ports[0], ports[1]
        self.metrics_ports = ports[2:]  # [0]: JobManager, [1 + i]: TaskManager slot i
        self.rest_url = f"http://127.0.0.1:{self.rest_port}"
        self.jobmanager: FlinkProcess | None = None
        self.taskmanagers: dict[int, FlinkProcess] = {}
        self.prometheus_url: str | None = None
        self._stack = contextlib.ExitStack()
        self._lock = threading.RLock()
        self._supervisor: threading.Thread | None = None
        self._stopping = threading.Event()
        self._jar_id: str | None = None
        self._spawned = 0  # TaskManagers started so far: their resource ids (`tm_id`) are tm-<slot>-<n>
        self.history: list[tuple[float, str]] = []  # (time, what happened): starts, stops, rescales

    # --- configuration ----------------------------------------------------------------------------------

    @property
    def conf_dir(self) -> Path:
        return self.workdir / "conf"

    @property
    def scrape_targets(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.metrics_ports] + self.extra_targets

    def config(self) -> dict[str, Any]:
        """The cluster's `config.yaml` (flat keys)."""
        cp = self.workdir / "checkpoints"
        conf: dict[str, Any] = {
            "env.java.opts.all": JAVA_OPTS,
            "jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": self.rpc_port,
            "jobmanager.bind-host": "127.0.0.1", "taskmanager.bind-host": "127.0.0.1", "taskmanager.host": "127.0.0.1",
            "rest.address": "127.0.0.1", "rest.bind-address": "127.0.0.1", "rest.port": self.rest_port,
            "blob.server.port": "0", "taskmanager.rpc.port": "0", "taskmanager.data.port": 0,
            "jobmanager.memory.process.size": self.memory, "taskmanager.memory.process.size": self.memory,
            "taskmanager.memory.managed.fraction": 0.1, "taskmanager.numberOfTaskSlots": 1,
            "parallelism.default": 1,
            "jobmanager.scheduler": "adaptive",
            "jobmanager.adaptive-scheduler.executing.cooldown-after-rescaling": "5 s",
            "jobmanager.adaptive-scheduler.executing.resource-stabilization-timeout": "5 s",
            "jobmanager.adaptive-scheduler.submission.resource-stabilization-timeout": "2 s",
            "execution.checkpointing.interval": f"{self.checkpoint_interval_s:g} s",
            "execution.checkpointing.mode": "EXACTLY_ONCE",
            # Under backpressure an aligned barrier waits behind every buffered record: unaligned checkpoints keep
            # checkpoints, and so rescales (applied at the next checkpoint), fast when the job is saturated.
            "execution.checkpointing.unaligned.enabled": True,
            # Buffer debloating keeps about a second of records in flight: the source's pending records are then
            # nearly the whole backlog, and a checkpoint's in-flight data stays small.
            "taskmanager.network.memory.buffer-debloat.enabled": True,
            # Small network buffers from the start: after a restart, before debloating adapts, 32 KiB buffers would
            # take tens of thousands of records out of the source's pending count and hide them in flight.
            "taskmanager.memory.segment-size": "4kb",
            "taskmanager.network.memory.floating-buffers-per-gate": 4,
            "state.checkpoints.dir": cp.as_uri(), "state.savepoints.dir": (self.workdir / "savepoints").as_uri(),
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 1000, "restart-strategy.fixed-delay.delay": "1 s",
            "heartbeat.timeout": 15000, "heartbeat.interval": 2000,
            # The TaskManagers start with the JobManager (start()): one that asks before the JobManager answers tries
            # again a second later, not after the default 10 s.
            "cluster.registration.error-delay": "1 s",
            "web.refresh-interval": 1000,  # the REST job view's cache (default 3 s) would exaggerate a downtime
            "metrics.reporter.prom.factory.class": "org.apache.flink.metrics.prometheus.PrometheusReporterFactory",
            "metrics.reporter.prom.port": str(self.metrics_ports[0]),
            "metrics.reporter.prom.interval": "1 s",
            "io.tmp.dirs": str(self.workdir / "tmp"),
            "web.upload.dir": str(self.workdir / "upload"),
            "env.log.dir": str(self.workdir / "log"), "env.pid.dir": str(self.workdir / "pid"),
        }
        if self.mode == "reactive":
            conf["scheduler-mode"] = "reactive"
        conf.update(self.extra_config)
        return conf

    def _write_config(self) -> None:
        for sub in ("conf", "log", "pid", "tmp", "upload", "checkpoints", "savepoints", "lib"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        lines = [f"{k}: {json.dumps(v) if isinstance(v, str | bool) else v}" for k, v in self.config().items()]
        (self.conf_dir / "config.yaml").write_text("\n".join(lines) + "\n")
        # File logging only, with milliseconds: the JobManager's log is the ground truth of a rescale's downtime.
        (self.conf_dir / "log4j-console.properties").write_text(
            "rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = File\n"
            "appender.file.name = File\nappender.file.type = File\nappender.file.append = true\n"
            "appender.file.fileName = ${sys:log.file}\nappender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n\n"
            "logger.pekko.name = org.apache.pekko\nlogger.pekko.level = WARN\n"
            "logger.netty.name = org.jboss.netty.channel.DefaultChannelPipeline\nlogger.netty.level = OFF\n")
        if self.mode == "reactive":  # the application's jar on every process's class path, beside Flink's own
            lib = self.workdir / "lib"
            for jar in [*(self.home / "lib").glob("*.jar"), job_jar(home=self.home)]:
                link = lib / jar.name
                if not link.exists():
                    link.symlink_to(jar)

    # --- processes --------------------------------------------------------------------------------------

    def _env(self, log_dir: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"FLINK_HOME": str(self.home), "FLINK_CONF_DIR": str(self.conf_dir), "FLINK_LOG_DIR": str(log_dir),
                    "FLINK_PID_DIR": str(log_dir), "_FLINK_HOME_DETERMINED": "1"})
        if self.mode == "reactive":
            env["FLINK_LIB_DIR"] = str(self.workdir / "lib")
        return env

    def _spawn(self, role: Literal["jobmanager", "taskmanager"], slot: int) -> FlinkProcess:
        port = self.metrics_ports[0] if role == "jobmanager" else self.metrics_ports[1 + slot]
        name = "jobmanager" if role == "jobmanager" else f"taskmanager-{slot}"
        log_dir = self.workdir / "log" / name
        log_dir.mkdir(parents=True, exist_ok=True)
        # `-D` and its value as two words: jobmanager.sh reads a word that is not `-D` as a host name.
        dynamic = ["-D", f"metrics.reporter.prom.port={port}"]
        if role == "taskmanager":
            self._spawned += 1
            cmd = [str(self.home / "bin" / "taskmanager.sh"), "start-foreground", *dynamic,
                   "-D", f"taskmanager.resource-id=tm-{slot}-{self._spawned}"]
        elif self.mode == "reactive":
            assert self.application is not None
            cmd = [str(self.home / "bin" / "standalone-job.sh"), "start-foreground", "--job-classname", JOB_CLASS,
                   *dynamic, *self.application.args()]
        else:
            cmd = [str(self.home / "bin" / "jobmanager.sh"), "start-foreground", *dynamic]
        out = (log_dir / "console.out").open("ab")
        try:
            popen = subprocess.Popen(["bash", *cmd], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=self._env(log_dir), cwd=self.workdir, start_new_session=True)
        finally:
            out.close()
        proc = FlinkProcess(role, slot, port, log_dir, popen)
        self.history.append((proc.started, f"started {name} (pid {proc.pid})"))
        return proc

    def _end(self, proc: FlinkProcess, timeout_s: float | None = None) -> None:
        """SIGTERM to the process group (the JVM runs its shutdown hooks), SIGKILL if it outlives the timeout."""
        if proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.popen.wait(timeout=self.stop_timeout_s if timeout_s is None else timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything the script left in the group
        self.history.append((time.time(), f"stopped {proc.role} {proc.slot} (pid {proc.pid})"))

    def pids(self) -> list[int]:
        """The JVMs of this cluster that are still running."""
        procs = [self.jobmanager, *self.taskmanagers.values()]
        return [p.pid for p in procs if p is not None and p.alive()]

    def rss_bytes(self) -> int:
        """Resident memory of every JVM of the cluster now."""
        procs = [self.jobmanager, *self.taskmanagers.values()]
        return sum(p.rss_bytes() for p in procs if p is not None and p.alive())

    # --- lifecycle --------------------------------------------------------------------------------------

    def __enter__(self) -> LocalFlink:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._write_config()
        self.jobmanager = self._spawn("jobmanager", 0)
        for slot in range(self.initial_taskmanagers):
            self.taskmanagers[slot] = self._spawn("taskmanager", slot)
        if self._prometheus_factory is not None:
            self.prometheus_url = self._stack.enter_context(
                self._prometheus_factory(self.workdir / "prometheus", self.scrape_targets, self.scrape_interval))
        self._wait(lambda: self.rest("GET", "/overview") is not None, "the JobManager's REST API")
        self.wait_taskmanagers(self.initial_taskmanagers)
        if self.mode == "reactive":
            write_json(self.state_file, {"taskmanagers": len(self.taskmanagers), "decision": None,
                                         "rest": self.rest_url, "max": self.max_taskmanagers, "running": True})
            self._supervisor = threading.Thread(target=self._supervise, name="flink-reactive-supervisor", daemon=True)
            self._supervisor.start()

    def stop(self) -> None:
        """End everything this cluster started: TaskManagers, then the JobManager, then Prometheus."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=10)
        if self.jobmanager is not None and self.jobmanager.alive():
            self._cancel_jobs()
        with self._lock:
            for slot in sorted(self.taskmanagers, reverse=True):
                self._end(self.taskmanagers.pop(slot))
            if self.jobmanager is not None:
                self._end(self.jobmanager)
        self._stack.close()
        if self.state_file.parent.exists():
            state = read_json(self.state_file) or {}
            write_json(self.state_file, {**state, "running": False})

    def _cancel_jobs(self) -> None:
        """Best effort: cancel what still runs, so stopping the TaskManagers does not set off failovers first."""
        with contextlib.suppress(ConnectorError, KeyError, TypeError):
            jobs = (self.rest("GET", "/jobs/overview", timeout=5) or {}).get("jobs", [])
            live = [j["jid"] for j in jobs if j["state"] not in ("FINISHED", "CANCELED", "FAILED")]
            for jid in live:
                self.rest("PATCH", f"/jobs/{jid}?mode=cancel", timeout=5)
            deadline = time.monotonic() + 15
            while live and time.monotonic() < deadline:
                states = {j["jid"]: j["state"] for j in (self.rest("GET", "/jobs/overview", timeout=5) or {})
                          .get("jobs", [])}
                if all(states.get(jid) in ("FINISHED", "CANCELED", "FAILED", None) for jid in live):
                    break
                time.sleep(0.3)

    def _wait(self, ok: Callable[[], bool], what: str, timeout_s: float | None = None) -> float:
        started = time.monotonic()
        deadline = started + (self.start_timeout_s if timeout_s is None else timeout_s)
        while time.monotonic() < deadline:
            if self.jobmanager is not None and not self.jobmanager.alive():
                raise ConnectorError(f"the JobManager exited while waiting for {what}; log: {self._jm_log_tail()}")
            with contextlib.suppress(requests.RequestException, ConnectorError, KeyError, ValueError):
                if ok():
                    return time.monotonic() - started
            time.sleep(0.25)
        raise TimeoutError(f"local Flink in {self.workdir}: no {what} within {deadline - started:.0f} s")

    def _jm_log_tail(self) -> str:
        log = self.jobmanager.log_file() if self.jobmanager else None
        text = log.read_text(errors="replace") if log else ""
        console = (self.jobmanager.log_dir / "console.out") if self.jobmanager else None
        if console is not None and console.exists():
            text += console.read_text(errors="replace")
        return text[-3000:]

    # --- REST -------------------------------------------------------------------------------------------

    def rest(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call to the JobManager's REST API; None when it is not answering yet."""
        try:
            r = requests.request(method, self.rest_url + path, timeout=kwargs.pop("timeout", 10), **kwargs)
        except requests.RequestException:
            return None
        if r.status_code >= 400:
            raise ConnectorError(f"{method} {path}: HTTP {r.status_code}: {r.text[:500]}")
        return r.json() if r.content else {}

    def registered_taskmanagers(self) -> int:
        overview = self.rest("GET", "/overview")
        return int(overview["taskmanagers"]) if overview else 0

    def wait_taskmanagers(self, n: int, timeout_s: float | None = None) -> float:
        return self._wait(lambda: self.registered_taskmanagers() == n, f"{n} registered TaskManagers", timeout_s)

    def submit(self, job: TraceJob, parallelism: int = 1) -> str:
        """Upload the job's jar (once) and run it (session mode); returns the job id."""
        if self.mode != "session":
            raise ValueError("a reactive cluster runs its application job from the start")
        if self._jar_id is None:
            jar = job_jar(home=self.home)
            with jar.open("rb") as f:
                jarfile = (jar.name, f, "application/x-java-archive")
                uploaded = self.rest("POST", "/jars/upload", files={"jarfile": jarfile}, timeout=60)
            if uploaded is None:
                raise ConnectorError(f"the JobManager at {self.rest_url} did not answer the jar upload")
            self._jar_id = Path(uploaded["filename"]).name
        body = {"entryClass": JOB_CLASS, "programArgsList": job.args(), "parallelism": parallelism}
        run = self.rest("POST", f"/jars/{self._jar_id}/run", json=body, timeout=120)
        if run is None:
            raise ConnectorError(f"the JobManager at {self.rest_url} did not answer the job submission")
        self.history.append((time.time(), f"submitted {job.name} as {run['jobid']} at parallelism {parallelism}"))
        return str(run["jobid"])

    def job_id(self, name: str) -> str | None:
        """The id of the running (not terminated) job called `name`."""
        jobs = (self.rest("GET", "/jobs/overview") or {}).get("jobs", [])
        live = [j for j in jobs if j["name"] == name and j["state"] not in ("FINISHED", "CANCELED", "FAILED")]
        return str(live[0]["jid"]) if live else None

    def job(self, job_id: str) -> dict[str, Any]:
        return self.rest("GET", f"/jobs/{job_id}") or {}

    def running_parallelism(self, job_id: str) -> int | None:
        """The job's parallelism when every subtask of every vertex runs; None while it does not."""
        job = self.job(job_id)
        if job.get("state") != "RUNNING":
            return None
        vertices = job.get("vertices", [])
        if not vertices or any(v.get("status") != "RUNNING" for v in vertices):
            return None
        return max(int(v["parallelism"]) for v in vertices)

    def wait_running(self, job_id: str, parallelism: int | None = None, timeout_s: float | None = None) -> float:
        def ok() -> bool:
            p = self.running_parallelism(job_id)
            return p is not None and (parallelism is None or p == parallelism)

        return self._wait(ok, f"job {job_id} running" + ("" if parallelism is None else f" at {parallelism}"),
                          timeout_s)

    def wait_state(self, job_id: str, state: str, timeout_s: float = 60.0) -> float:
        return self._wait(lambda: self.job(job_id).get("state") == state, f"job {job_id} {state}", timeout_s)

    def stop_with_savepoint(self, job_id: str, timeout_s: float = 120.0) -> str:
        """Stop the job with a final savepoint (the sink commits everything up to it); returns its path."""
        trigger = self.rest("POST", f"/jobs/{job_id}/stop", json={"drain": False}, timeout=30)
        if trigger is None:
            raise ConnectorError(f"the JobManager at {self.rest_url} did not answer the stop request")
        request = trigger["request-id"]
        result: dict[str, Any] = {}

        def done() -> bool:
            nonlocal result
            result = self.rest("GET", f"/jobs/{job_id}/savepoints/{request}") or {}
            return result.get("status", {}).get("id") == "COMPLETED"

        self._wait(done, f"the stop-with-savepoint of {job_id}", timeout_s)
        operation = result.get("operation", {})
        if "failure-cause" in operation:
            raise ConnectorError(f"stop-with-savepoint of {job_id} failed: {operation['failure-cause']}")
        self._wait(lambda: self.job(job_id).get("state") == "FINISHED", f"job {job_id} finished", timeout_s)
        return str(operation.get("location"))

    # --- TaskManagers (reactive mode, faults) -----------------------------------------------------------

    def add_taskmanager(self) -> FlinkProcess:
        with self._lock:
            free = [s for s in range(self.max_taskmanagers) if s not in self.taskmanagers]
            if not free:
                raise ConnectorError(f"already {self.max_taskmanagers} TaskManagers (the cluster's maximum)")
            proc = self._spawn("taskmanager", free[0])
            self.taskmanagers[free[0]] = proc
            return proc

    def remove_taskmanager(self, slot: int | None = None, kill: bool = False) -> FlinkProcess:
        """Stop a TaskManager (the highest slot by default); `kill` ends it with SIGKILL, as a crash would."""
        with self._lock:
            if not self.taskmanagers:
                raise ConnectorError("no TaskManager to stop")
            slot = max(self.taskmanagers) if slot is None else slot
            proc = self.taskmanagers.pop(slot)
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.popen.wait(timeout=30)
            self.history.append((time.time(), f"killed taskmanager {slot} (pid {proc.pid})"))
        else:
            self._end(proc)
        return proc

    @staticmethod
    def slot_of(tm_id: str) -> int | None:
        """The slot of a TaskManager from its `tm_id` label: resource ids are `tm-<slot>-<n>`, which Flink's reporter
        publishes as `tm_<slot>_<n>`."""
        m = re.fullmatch(r"tm[-_](\d+)[-_]\d+", tm_id)
        return int(m.group(1)) if m else None

    @property
    def control_file(self) -> Path:
        return self.workdir / "control.json"

    @property
    def state_file(self) -> Path:
        return self.workdir / "state.json"

    def _supervise(self) -> None:
        """Reactive mode: apply `control.json` (wanted TaskManagers, decision) once per decision; report in
        `state.json`. The connector (`connectors/flink_rest.py`, kind `flink-reactive`) writes the one and reads
        the other; the job's parallelism then follows the TaskManagers (Flink's reactive mode)."""
        while not self._stopping.wait(0.2):
            control = read_json(self.control_file)
            state = read_json(self.state_file) or {}
            if not control or control.get("decision") == state.get("decision"):
                continue
            wanted = int(control["taskmanagers"])
            if not 1 <= wanted <= self.max_taskmanagers:
                write_json(self.state_file, {**state, "decision": control.get("decision"),
                                             "error": f"{wanted} is outside 1..{self.max_taskmanagers}"})
                continue
            self.history.append((time.time(), f"reactive: {len(self.taskmanagers)} → {wanted} TaskManagers "
                                              f"(decision {control.get('decision')})"))
            while len(self.taskmanagers) < wanted:
                self.add_taskmanager()
            while len(self.taskmanagers) > wanted:
                self.remove_taskmanager()
            write_json(self.state_file, {"taskmanagers": len(self.taskmanagers), "decision": control.get("decision"),
                                         "rest": self.rest_url, "max": self.max_taskmanagers, "running": True})


# --- what the JobManager's log says about a rescale ------------------------------------------------------------

_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*? - "
_TASK = re.compile(_STAMP + r"(.+?) \((\d+)/(\d+)\)(?: - execution #\d+)? \(([0-9a-f]+)[0-9a-f_]*\) "
                   r"switched from (\w+) to (\w+)")
_JOB = re.compile(_STAMP + r"Job .* \([0-9a-f]{32}\) switched from state (\w+) to (\w+)")
_GRAPH = re.compile(_STAMP + r"Created execution graph ([0-9a-f]+) for job ([0-9a-f]{32})")


@dataclass(frozen=True)
class Outage:
    """One interruption of a job, from its JobManager's log: the first running subtask leaving RUNNING (`down`),
    the job RUNNING again (`restarted`: what the job's uptime metric counts from), every subtask of the new execution
    RUNNING (`up`)."""

    down: float  # epoch seconds
    restarted: float | None
    up: float
    parallelism: int  # of the new execution (its largest vertex)

    @property
    def seconds(self) -> float:
        return self.up - self.down


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def outages(log: Path | str) -> list[Outage]:
    """Every interruption of the job in a JobManager log (rescales, failovers), in order: the ground truth the
    recovery monitor's downtime is compared with (the REST job view is cached, and polling it exaggerates)."""
    text = Path(log).read_text(errors="replace") if isinstance(log, Path) else log
    # Per execution graph (the first part of an attempt's id; the adaptive scheduler builds a new one at each restart,
    # and another job, such as the demo's probe, has its own): task → its parallelism, task → subtasks RUNNING. Tasks
    # of another graph never hold up this one's "every subtask RUNNING" (the probe's tasks are not the job's).
    size: dict[str, dict[str, int]] = {}
    running: dict[str, dict[str, set[int]]] = {}
    job_of: dict[str, str] = {}  # graph → its job, where the log says (a graph of another job ends no outage)
    current: str | None = None  # the graph whose subtasks last all ran
    down: float | None = None
    restarted: float | None = None
    found = []
    for line in text.splitlines():
        created = _GRAPH.match(line)
        if created is not None:
            job_of[created.group(2)] = created.group(3)
            continue
        job = _JOB.match(line)
        if job is not None:
            if down is not None and job.group(3) == "RUNNING":
                restarted = _stamp(job.group(1))
            continue
        m = _TASK.match(line)
        if m is None:
            continue
        t, task, index, of, graph, old, new = (_stamp(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4)),
                                               *m.groups()[4:])
        tasks, up = size.setdefault(graph, {}), running.setdefault(graph, {})
        tasks[task] = of
        if new == "RUNNING":
            up.setdefault(task, set()).add(index)
            if all(len(up.get(v, ())) == n for v, n in tasks.items()):
                if down is not None and job_of.get(graph) == job_of.get(current or ""):
                    found.append(Outage(down, restarted, t, max(tasks.values())))
                down, restarted = None, None
                current = graph
        elif old == "RUNNING" and down is None and graph == current:
            down = t  # the current execution ends: count the next one from scratch
            running[graph] = {}
    return found
