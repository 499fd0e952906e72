"""Shared pieces of the fault-injection tests: a real Prometheus holding backfilled bad data (one namespace per
case), the loopback Kubernetes API (tests/connectors/fake_kube.py) behind a kubeconfig, a jobs file over both, one
`daedalus step` in-process or as a process, and the checks every case ends with (the ledger, the secrets).

Every job scales the same Deployment, streaming/flink-taskmanager (the Role of deployments/k8s/rbac.yaml names it);
each test starts its own loopback API with the replica count it needs.

The backfill: per namespace, 3 TaskManager pods sampled every 15 s for 25 minutes from T0 (two hours ago). A
sound job processes 360-400 tuples/s per pod at CPU throughput / 2000 (0.18-0.20), with 1,200 tuples/s arriving and
600 tuples of backlog: one TaskManager can carry it, so its first step scales in from 3 (how far is the planner's).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import yaml

from daedalus.connectors.store import Store
from daedalus.models.types import LedgerEntry
from daedalus.runtime.ports import free_port
from daedalus.runtime.prometheus import local_prometheus
from tests.connectors.fake_kube import FakeKube, Fault, Server

__all__ = ["Fault"]  # re-exported for the tests

STEP = 15
T0 = (int(time.time()) - 7200) // 60 * 60  # two hours ago, on a minute
SAMPLES = 101  # T0 … T0 + 1500
AT = T0 + 720  # the first step: its first window (600 s) starts after the rate window (60 s) has filled
DEP = "/apis/apps/v1/namespaces/streaming/deployments/flink-taskmanager"

# The secrets no output may show: the Prometheus bearer token (from the environment), the kubeconfig's token, and a
# password someone put into a Prometheus URL.
PROM_TOKEN_ENV = "DAEDALUS_FAULTS_PROM_TOKEN"
PROM_TOKEN = "Pr0m-B3arer-7f3a9c41e2"
KUBE_TOKEN = "K8s-T0ken-5be1d2aa90"
URL_PASSWORD = "Url-Passw0rd-91ce77"
SECRETS = (PROM_TOKEN, KUBE_TOKEN, URL_PASSWORD)
ROOT = Path(__file__).resolve().parents[2]
DAEDALUS = Path(sys.executable).parent / "daedalus"


# --- the backfill and the queries that read it -----------------------------------------------------------------

# The queries are pinned (a `queries:` override of every template): the data each case backfills stays exactly as bad
# as it says, whatever the engine's default templates become. They are Flink's reactive-mode templates: source
# records out per second and JVM CPU load per pod, registered TaskManagers, Kafka source `pendingRecords`.
_CPU = "flink_taskmanager_Status_JVM_CPU_Load{${selector}}"
_MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total{topic=${source.topic}}"
QUERIES = {
    "workload": f"sum(rate({_MESSAGES_IN}[${{window}}]))",
    "resets": f"sum(resets({_MESSAGES_IN}[${{range}}])) or vector(0)",
    "throughput": 'sum by (pod) (flink_taskmanager_job_task_operator_numRecordsOutPerSecond{${selector}, '
                  'operator_name=~"Source.*"})',
    "cpu": f"max by (pod) ({_CPU})",
    "fresh": f"sum by (pod) (count_over_time({_CPU}[${{stale}}]))",
    "duplicates": f"{_CPU} and on (pod) (count by (pod) ({_CPU}) > 1)",
    "lag": "sum(flink_taskmanager_job_task_operator_pendingRecords{${selector}})",
    "scaleout": "max(flink_jobmanager_numRegisteredTaskManagers{${selector}})",
    "uptime": "max(flink_jobmanager_job_uptime{${selector}}) / 1000",
}


@dataclass(frozen=True)
class Case:
    """One namespace of the backfill: a sound job, and what is wrong with it."""

    namespace: str
    pods: int = 3
    arrivals: float = 1200.0  # tuples/s, as the broker's messages-in counter
    throughput: Callable[[int, int], float] | None = None  # (pod index, sample index) → tuples/s
    cpu: Callable[[int, int], float | str | None] | None = None  # None: absent at that sample; "NaN"
    lag: Callable[[int, int], float | None] | None = None
    absent: Callable[[int, int], bool] = lambda k, i: False  # the pod exports nothing at that sample
    reset_at: int | None = None  # sample index at which the counter restarts from 0
    no_lag: bool = False  # no pendingRecords series at all
    duplicate: int | None = None  # this pod is scraped twice (an extra `instance` label)


def _thr(k: int, i: int) -> float:
    return 360.0 + 20.0 * ((i + k) % 3)


def _cpu(k: int, i: int) -> float:
    return _thr(k, i) / 2000.0


CASES = {c.namespace: c for c in (
    Case("ok"),
    Case("nan", cpu=lambda k, i: "NaN" if (k, i) == (0, 36) else _cpu(k, i)),
    Case("negative", throughput=lambda k, i: -50.0 if k == 1 and 30 <= i <= 33 else _thr(k, i)),
    Case("partial", cpu=lambda k, i: None if k == 1 and 20 <= i <= 23 else _cpu(k, i)),
    Case("stale", absent=lambda k, i: k == 2 and i >= 30),
    Case("reset", reset_at=32),
    Case("empty", no_lag=True),
    Case("cpuhigh", cpu=lambda k, i: 1.7 if k == 0 and 25 <= i <= 40 else _cpu(k, i)),
    Case("dup", duplicate=1),
    Case("idle", arrivals=0.0, throughput=lambda k, i: 0.0, cpu=lambda k, i: 0.02, lag=lambda k, i: 0.0),
    # 4,002 tuples/s processed of 1,000 arriving, with 20,000 tuples of backlog: at most (1,000 + 20,000 / 15) ×
    # 1.05 can be processed per second.
    Case("overrun", arrivals=1000.0, throughput=lambda k, i: 1334.0, cpu=lambda k, i: 0.5,
         lag=lambda k, i: (6667.0, 6667.0, 6666.0)[k]),
    # A namespace literally named `.*`, with 2 TaskManagers: only an escaped regex matcher picks it alone.
    Case(".*", pods=2),
)}
TOPICS = {".*": "regex-events"}


def topic(namespace: str) -> str:
    return TOPICS.get(namespace, f"{namespace}-events")


def openmetrics(cases: Mapping[str, Case] = CASES) -> str:
    """The backfill as OpenMetrics text (promtool tsdb create-blocks-from openmetrics)."""
    names = {"thr": "flink_taskmanager_job_task_operator_numRecordsOutPerSecond",
             "cpu": "flink_taskmanager_Status_JVM_CPU_Load",
             "lag": "flink_taskmanager_job_task_operator_pendingRecords",
             "tms": "flink_jobmanager_numRegisteredTaskManagers", "up": "flink_jobmanager_job_uptime",
             "msg": "kafka_server_brokertopicmetrics_messagesin"}
    fam: dict[str, list[tuple[str, int, str]]] = {k: [] for k in names}  # (labels, time, value)
    for c in cases.values():
        for k in range(c.pods):
            pod = f"tm-{k}"
            for instance in ("a:9249", "b:9249") if c.duplicate == k else (None,):
                labels = f'namespace="{c.namespace}",cluster="c1",pod="{pod}"'
                labels += f',instance="{instance}"' if instance else ""
                for i in range(SAMPLES):
                    t = T0 + STEP * i
                    if c.absent(k, i):
                        continue
                    thr = (c.throughput or _thr)(k, i)
                    fam["thr"].append((f'{labels},operator_name="Source: events"', t, f"{thr:g}"))
                    cpu = (c.cpu or _cpu)(k, i)
                    if cpu is not None:
                        fam["cpu"].append((labels, t, cpu if isinstance(cpu, str) else f"{cpu:.3f}"))
                    if not c.no_lag:
                        lag = 100.0 * (k + 1) if c.lag is None else c.lag(k, i)
                        fam["lag"].append((labels, t, f"{lag:g}"))
        job = f'namespace="{c.namespace}",cluster="c1"'
        for i in range(SAMPLES):
            t = T0 + STEP * i
            fam["tms"].append((job, t, str(c.pods)))
            fam["up"].append((job, t, str(3_600_000 + 15_000 * i)))
            start = 0 if c.reset_at is None or i < c.reset_at else c.reset_at
            fam["msg"].append((f'topic="{topic(c.namespace)}"', t, f"{c.arrivals * STEP * (i - start):.0f}"))
    lines = []
    for key, name in names.items():
        lines.append(f"# TYPE {name} {'counter' if key == 'msg' else 'gauge'}")
        suffix = "_total" if key == "msg" else ""
        lines += [f"{name}{suffix}{{{labels}}} {value} {t}" for labels, t, value in sorted(fam[key])]
    return "\n".join(lines) + "\n# EOF\n"


@contextlib.contextmanager
def prometheus(folder: Path) -> Iterator[str]:
    with local_prometheus(folder, openmetrics=openmetrics()) as url:
        yield url


# --- a Prometheus that fails on purpose ------------------------------------------------------------------------

class _Failing(BaseHTTPRequestHandler):
    status: ClassVar[int] = 503
    delay: ClassVar[float] = 0.0
    echo: ClassVar[bool] = False  # put the request's headers into the error body, as a verbose proxy would
    hits: ClassVar[int] = 0

    def do_GET(self) -> None:
        cls = type(self)
        cls.hits += 1
        time.sleep(cls.delay)
        body = json.dumps({"status": "error", "errorType": "unavailable",
                           "error": "overloaded" + (f"; request headers: {dict(self.headers)}" if cls.echo else "")
                           }).encode()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
            self.send_response(cls.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def failing_prometheus(status: int = 503, delay: float = 0.0, echo: bool = False) -> Iterator[str]:
    """A loopback 'Prometheus' that answers every query with `status` after `delay` seconds."""
    handler = type("Failing", (_Failing,), {"status": status, "delay": delay, "echo": echo, "hits": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def nothing_listening() -> str:
    return f"http://127.0.0.1:{free_port()}"


# --- the loopback Kubernetes API -------------------------------------------------------------------------------

@dataclass
class Kube:
    fake: FakeKube
    url: str
    kubeconfig: Path

    @property
    def replicas(self) -> int | None:
        obj = self.fake.objects.get(DEP)
        return None if obj is None else obj["spec"]["replicas"]

    def patches(self) -> list[Any]:
        return [r for r in self.fake.requests if r.method == "PATCH"]

    def changes(self) -> list[tuple[int, int]]:
        """Persisted writes that changed the replica count: (before, after)."""
        return [(before, after) for _, before, after in self.fake.changes if before != after]


@contextlib.contextmanager
def kube(folder: Path, replicas: int = 3) -> Iterator[Kube]:
    """The loopback API with the Deployment at `replicas`, and a kubeconfig (with a token) that points at it."""
    fake = FakeKube()
    fake.add("apps", "v1", "deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "flink-taskmanager", "namespace": "streaming"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "flink-taskmanager"}}},
        "status": {"replicas": replicas, "readyReplicas": replicas}})
    server = Server(fake)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "loopback", "cluster": {"server": server.url}}],
        "users": [{"name": "worker", "user": {"token": KUBE_TOKEN}}],
        "contexts": [{"name": "test", "context": {"cluster": "loopback", "user": "worker"}}]}))
    try:
        yield Kube(fake, server.url, config)
    finally:
        server.close()


# --- the jobs file ---------------------------------------------------------------------------------------------

def regex_queries() -> dict[str, str]:
    """The Flink templates with the namespace matched by a regex (`=~`) instead of `=`: a selector value like
    `.*` must still match only itself."""
    label = "namespace=~${selector.namespace}, cluster=${selector.cluster}"
    return {key: template.replace("${selector}", label) for key, template in QUERIES.items()}


def job(name: str, prom_url: str, namespace: str | None = None, **overrides: Any) -> dict[str, Any]:
    """A Flink job over one namespace of the backfill, scaling the loopback Deployment."""
    ns = name if namespace is None else namespace
    prometheus = {"url": prom_url, "step": "15s", "timeout": "5s", "deadline": "10s", "retries": 2,
                  "auth": {"kind": "bearer", "token_env": PROM_TOKEN_ENV}, **overrides.pop("prometheus", {})}
    entry = {"name": name, "engine": "flink", "prometheus": prometheus,
             "selector": {"namespace": ns, "cluster": "c1"}, "source": {"topic": topic(ns)},
             "queries": dict(QUERIES),
             "scale_target": {"kind": "Deployment", "namespace": "streaming", "name": "flink-taskmanager",
                              "ready_timeout": "3s"},
             "scaleout": {"min": 1, "max": 8}}
    for key, value in overrides.items():
        entry[key] = {**entry[key], **value} if isinstance(value, dict) and isinstance(entry.get(key), dict) else value
    return entry


def write_jobs(path: Path, *entries: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"jobs": list(entries)}, sort_keys=False, allow_unicode=True))
    return path


# --- one step of the loop --------------------------------------------------------------------------------------

@dataclass
class Step:
    exit_code: int
    stdout: str
    stderr: str
    report: dict[str, Any] | None
    seconds: float
    texts: list[str] = field(default_factory=list)  # everything it printed or wrote, for the secret check

    @property
    def kind(self) -> str:
        assert self.report is not None, self.stdout + self.stderr
        return self.report["decision"]["kind"]

    @property
    def reasons(self) -> str:
        assert self.report is not None, self.stdout + self.stderr
        return " | ".join(self.report["decision"]["reasons"])

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def environment(kube: Kube | None, store: Path) -> dict[str, str]:
    """The step's environment: the bearer token, the kubeconfig, and no settings file (`daedalus deploy` may have
    written one in this machine's home: its store, jobs file and Prefect API are not the test's)."""
    env = {PROM_TOKEN_ENV: PROM_TOKEN, "DAEDALUS_SETTINGS": str(store.parent / "no-settings.toml")}
    if kube is not None:
        env["KUBECONFIG"] = str(kube.kubeconfig)
    return env


def _args(job: str, jobs: Path, store: Path, at: float | None, out: Path) -> list[str]:
    return ["step", job, "--jobs-file", str(jobs), "--store", str(store), "--json", str(out),
            *([] if at is None else ["--at", str(at)])]


def _report(out: Path) -> dict[str, Any] | None:
    return json.loads(out.read_text()) if out.exists() else None


def step(job: str, jobs: Path, store: Path, at: float | None, kube: Kube | None, out: Path) -> Step:
    """`daedalus step` in this process (typer's CliRunner), through the session's Prefect API."""
    from typer.testing import CliRunner

    from daedalus.cli.main import app

    out.unlink(missing_ok=True)
    env = environment(kube, store)
    saved = {k: os.environ.get(k) for k in (*env, "KUBERNETES_SERVICE_HOST")}
    os.environ.update(env)
    os.environ.pop("KUBERNETES_SERVICE_HOST", None)
    started = time.monotonic()
    try:
        result = CliRunner().invoke(app, _args(job, jobs, store, at, out))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.monotonic() - started
    report = _report(out)
    stderr = result.stderr if result.stderr_bytes is not None else ""
    stdout = result.stdout + ("" if result.exception is None or isinstance(result.exception, SystemExit)
                              else f"\n{type(result.exception).__name__}: {result.exception}")
    texts = [stdout, stderr, out.read_text() if out.exists() else ""]
    return Step(result.exit_code, stdout, stderr, report, seconds, texts)


def step_process(job: str, jobs: Path, store: Path, at: float | None, kube: Kube | None, out: Path,
                 on_start: Callable[[subprocess.Popen[str]], None] | None = None, timeout: float = 180) -> Step:
    """`daedalus step` as its own process, through the session's Prefect API; `on_start` gets the process (a
    loopback server's hook may kill it)."""
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME

    out.unlink(missing_ok=True)
    env = {**os.environ, **environment(kube, store), "PREFECT_API_URL": str(PREFECT_API_URL.value()),
           "PREFECT_HOME": str(PREFECT_HOME.value()), "COLUMNS": "250"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    started = time.monotonic()
    proc = subprocess.Popen([str(DAEDALUS), *_args(job, jobs, store, at, out)], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if on_start is not None:
        on_start(proc)
    stdout, stderr = proc.communicate(timeout=timeout)
    report = _report(out)
    return Step(proc.returncode, stdout, stderr, report, time.monotonic() - started,
                [stdout, stderr, out.read_text() if out.exists() else ""])


# --- what every case checks ------------------------------------------------------------------------------------

def ledger(store: Path, job: str) -> list[LedgerEntry]:
    loaded = Store(str(store)).job(job).load()
    return [] if loaded.knowledge is None else list(loaded.knowledge.ledger)


def stored_texts(store: Path) -> list[str]:
    """Every file the store holds (knowledge versions, temporary files, the inbox), as text."""
    return [p.read_bytes().decode("utf-8", "replace") for p in sorted(store.rglob("*")) if p.is_file()]


def prefect_logs() -> list[str]:
    """Every log line the session's Prefect API holds, once the handler has sent what it buffers."""
    from prefect.client.orchestration import get_client
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    lines: list[str] = []
    with get_client(sync_client=True) as client:
        while True:
            batch = client.read_logs(limit=200, offset=len(lines))
            lines += [f"{log.id} {log.name} {log.level} {log.message}" for log in batch]
            if len(batch) < 200:
                return lines


def leaked(texts: list[str]) -> list[str]:
    """The secrets found in any of the texts (with where), none expected."""
    return [f"{secret!r} in output {n}: …{text[max(0, text.find(secret) - 80):text.find(secret) + 40]}…"
            for n, text in enumerate(texts) for secret in SECRETS if secret in text]


def check_ledger(store: Path, job: str, report: dict[str, Any] | None) -> list[LedgerEntry]:
    """The stored ledger agrees with the step's report: an actionable decision has exactly one entry, settled
    (nothing left `executing` by a run that finished); a hold or no change adds none."""
    entries = ledger(store, job)
    ids = [e.id for e in entries]
    assert len(ids) == len(set(ids)), f"duplicated ledger entries: {ids}"
    assert not [e for e in entries if e.state == "executing"], [(e.id, e.state) for e in entries]
    if report is not None:
        d = report["decision"]
        mine = [e for e in entries if e.id == d["id"]]
        if d["kind"] in ("scale-out", "scale-in"):
            assert len(mine) == 1 and mine[0].state == report["action"], (d, [(e.id, e.state) for e in entries])
            assert (mine[0].current, mine[0].target) == (d["current"], d["target"])
        else:
            assert mine == [] and report["action"] is None, (d, mine)
        assert Store(str(store)).job(job).versions()[-1] == report["knowledge_version"]
    return entries
