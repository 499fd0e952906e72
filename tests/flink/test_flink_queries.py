"""The Flink queries against what a real Flink 2.3 publishes: exposition text scraped from a local cluster.

`exposition-flink-2.3.txt` holds 8 scrapes, 2 s apart, of a JobManager, four TaskManagers and the trace's broker
counter, filtered to the metric families the queries read. The cluster ran `orders-job` at parallelism 2 (on
`tm_1_2` and `tm_3_4`), a decoy job `decoy-job` on `tm_0_1`, and `tm_2_3` idle. The lines are as the reporter wrote
them: job names sanitised (`orders_job`), TaskManager-scope series (`Status_JVM_CPU_Load`) with `tm_id` and `host`
only, the JobManager's `numRegisteredTaskManagers` with `host` only. The decoys: another job's TaskManager, an idle
TaskManager, and every downstream operator's own `numRecordsOut`.

The scrapes are backfilled into a real Prometheus (promtool) three times, an hour apart: as published (standalone,
workers told apart by `tm_id`), as Kubernetes service discovery would label them (`namespace`, `pod`), and with one
TaskManager scraped twice.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import requests
from flink_support import needs_prometheus

from daedalus.connectors.prometheus import PrometheusSource
from daedalus.connectors.promql import QuerySet
from daedalus.runtime.prometheus import local_prometheus

pytestmark = [needs_prometheus, pytest.mark.slow]

CAPTURE = Path(__file__).with_name("exposition-flink-2.3.txt")
JOB, TOPIC = "orders_job", "orders"
WORKERS = ("tm_1_2", "tm_3_4")  # the TaskManagers that run orders-job
PODS = {"tm_0_1": "flink-taskmanager-0", "tm_1_2": "flink-taskmanager-1", "tm_2_3": "flink-taskmanager-2",
        "tm_3_4": "flink-taskmanager-3"}
STEP = 2.0
_SAMPLE = re.compile(r"^(\w+)\{(.*?),?\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _rounds() -> list[tuple[float, str, list[tuple[str, dict[str, str], float]]]]:
    """(time, process, samples) per scraped process, as captured."""
    out: list[tuple[float, str, list[tuple[str, dict[str, str], float]]]] = []
    for line in CAPTURE.read_text().splitlines():
        if line.startswith("# scrape"):
            _, _, t, process = line.split()
            out.append((float(t), process, []))
        else:
            m = _SAMPLE.match(line)
            assert m, line
            out[-1][2].append((m.group(1), dict(_LABEL.findall(m.group(2))), float(m.group(3))))
    return out


ROUNDS = _rounds()
FIRST = min(t for t, _, _ in ROUNDS)
LAST = max(t for t, _, _ in ROUNDS)


def _variant(labels: dict[str, str], process: str, variant: str) -> list[dict[str, str]]:
    if variant == "kubernetes" and process.startswith("taskmanager"):
        tm = labels.get("tm_id") or next(v for k, v in PODS.items() if k.startswith(f"tm_{process[-1]}_"))
        return [{**labels, "namespace": "streaming", "pod": PODS[tm]}]
    if variant == "kubernetes":
        return [{**labels, "namespace": "streaming"}]
    if variant == "twice" and process == "taskmanager-1":
        return [{**labels, "instance": "a:9249"}, {**labels, "instance": "b:9249"}]
    return [labels]


def _openmetrics(base: dict[str, float]) -> str:
    """The capture as OpenMetrics with timestamps, once per variant at its own base time."""
    families: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for variant, shift in base.items():
        for t, process, samples in ROUNDS:
            for name, labels, value in samples:
                for ls in _variant(labels, process, variant):
                    text = ",".join(f'{k}="{v}"' for k, v in sorted(ls.items()))
                    families[name].append((f"{name}{{{text}}}", t + shift, value))
    lines = []
    for name, samples in sorted(families.items()):
        family = name.removesuffix("_total")
        lines.append(f"# TYPE {family} {'counter' if name.endswith('_total') else 'gauge'}")
        lines += [f"{series} {value:g} {t:.3f}" for series, t, value in sorted(samples)]
    return "\n".join(lines) + "\n# EOF\n"


NOW = float(int(time.time()) // 3600 * 3600)
# Each variant an hour apart, its last scrape on the query grid: the last step reads the newest values.
BASE = {"standalone": NOW - 3 * 3600 - LAST, "kubernetes": NOW - 2 * 3600 - LAST, "twice": NOW - 3600 - LAST}


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory):
    with local_prometheus(tmp_path_factory.mktemp("prom"), openmetrics=_openmetrics(BASE)) as url:
        yield url


def _observe(url: str, variant: str, selector: dict[str, str], worker: str, overrides: dict[str, str] | None = None):
    queries = QuerySet(JOB, "flink", selector, {"topic": TOPIC}, overrides or {}, 4 * STEP, 2 * STEP,
                       worker_label=worker)
    source = PrometheusSource(JOB, queries, url, step_s=STEP)
    shift = BASE[variant]
    return source.observe(JOB, FIRST + shift + 2 * STEP, LAST + shift)


def _last(name: str, **match: str) -> dict[str, float]:
    """The newest captured values of the series of `name` whose labels match, by tm_id (or job_name); several series
    of one TaskManager (its tasks) give their largest value."""
    newest: dict[tuple[str, ...], tuple[str, float]] = {}
    for _, _, samples in ROUNDS:
        for n, labels, value in samples:
            if n == name and all(labels.get(k) == v for k, v in match.items()):
                newest[tuple(sorted(labels.items()))] = (labels.get("tm_id") or labels.get("job_name", ""), value)
    found: dict[str, float] = {}
    for key, value in newest.values():
        found[key] = max(found.get(key, value), value)
    return found


def _counter_rate(name: str, tm: str, since: float = FIRST, **match: str) -> float:
    points = [(t, v) for t, _, samples in ROUNDS for n, labels, v in samples
              if t >= since and n == name and labels.get("tm_id") == tm
              and all(labels.get(k) == x for k, x in match.items())]
    (t0, v0), (t1, v1) = points[0], points[-1]
    return (v1 - v0) / (t1 - t0)


def _busy_share(tm: str, window: float) -> float:
    """The busiest of the TaskManager's tasks over the last `window` seconds: its cumulative busy ms per second."""
    name = "flink_taskmanager_job_task_accumulateBusyTimeMs"
    tasks = {labels["task_name"] for _, _, samples in ROUNDS for n, labels, _ in samples
             if n == name and labels.get("tm_id") == tm}
    return max(_counter_rate(name, tm, LAST - window, task_name=task) for task in tasks) / 1000


def test_the_capture_has_its_decoys():
    """Why the old queries found nothing: no job label on TaskManager or cluster-wide series."""
    cpu = _last("flink_taskmanager_Status_JVM_CPU_Load")
    assert set(cpu) == set(PODS)  # four TaskManagers, one of them idle, one running the decoy job
    names = {labels.get("job_name") for _, _, s in ROUNDS for n, labels, _ in s if n.startswith("flink_taskmanager")}
    assert names == {None, "orders_job", "decoy_job"}
    assert _last("flink_jobmanager_numRegisteredTaskManagers") == {"": 4.0}  # cluster-wide: no job_name


@pytest.mark.parametrize(("variant", "selector", "worker"), [
    ("standalone", {"job_name": JOB}, "tm_id"),
    ("kubernetes", {"namespace": "streaming", "job_name": JOB}, "pod"),
])
def test_the_job_and_only_the_job_is_observed(prom_url, variant, selector, worker):
    obs = _observe(prom_url, variant, selector, worker)
    expected = {tm: (PODS[tm] if worker == "pod" else tm) for tm in WORKERS}
    assert obs.holds == ()
    assert set(obs.throughput) == set(obs.cpu) == set(expected.values())
    assert obs.scaleout == 2  # its source's subtasks, not the 4 registered TaskManagers
    gauge = _last("flink_taskmanager_job_task_busyTimeMsPerSecond", job_name=JOB)
    pending = "flink_taskmanager_job_task_operator_pendingRecords"
    lag = {tm: _last(pending, job_name=JOB, tm_id=tm)[tm] for tm in WORKERS}
    uptime = _last("flink_jobmanager_job_uptime", job_name=JOB)
    assert obs.uptime_s[-1] == pytest.approx(uptime[JOB] / 1000)
    assert obs.lag[-1] == pytest.approx(sum(lag.values()))
    for tm, name in expected.items():
        # utilisation: the busiest of its tasks, busy ms per second over the rate window, not the 60 s gauge (which
        # still holds the job's start: 20 % higher in this capture)
        assert obs.cpu[name][-1] == pytest.approx(_busy_share(tm, 4 * STEP), rel=0.05)
        assert obs.cpu[name][-1] < 0.9 * gauge[tm] / 1000
        # throughput: records its work task takes in, per second (the source's output is not what it processes)
        rate = _counter_rate("flink_taskmanager_job_task_numRecordsIn", tm, job_name=JOB, task_name=(
            "work____committed_output:_Writer____committed_output:_Committer"))
        assert float(np.nanmean(obs.throughput[name])) == pytest.approx(rate, rel=0.1)
    total = np.nansum([obs.throughput[w] for w in obs.throughput], axis=0)
    assert float(np.mean(total)) == pytest.approx(float(np.mean(obs.workload)), rel=0.1)  # 300 records/s


def test_the_jvm_cpu_load_is_joined_to_the_jobs_taskmanagers(prom_url):
    obs = _observe(prom_url, "standalone", {"job_name": JOB}, "tm_id", {"cpu": "jvm-cpu-load"})
    cpu = _last("flink_taskmanager_Status_JVM_CPU_Load")
    assert set(obs.cpu) == set(WORKERS)  # not tm_0_1 (the decoy job's), not tm_1_2 (idle)
    for tm in WORKERS:
        assert obs.cpu[tm][-1] == pytest.approx(cpu[tm])


def test_the_old_job_selector_on_cluster_series_matches_nothing(prom_url):
    """Issue 12: `numRegisteredTaskManagers{job_name=…}` and the CPU load by `job_name` find no series."""
    overrides = {"scaleout": "max(flink_jobmanager_numRegisteredTaskManagers{${selector}})",
                 "cpu": "max by (${worker}) (flink_taskmanager_Status_JVM_CPU_Load{${selector}})"}
    queries = QuerySet(JOB, "flink", {"job_name": JOB}, {"topic": TOPIC}, overrides, 4 * STEP, 2 * STEP,
                       worker_label="tm_id")
    shift = BASE["standalone"]
    from daedalus.models.errors import ConnectorError

    with pytest.raises(ConnectorError, match="no current scaleout"):
        PrometheusSource(JOB, queries, prom_url, step_s=STEP).observe(JOB, FIRST + shift + 4, LAST + shift)


def test_a_taskmanager_scraped_twice_is_held_naming_its_scrapes(prom_url):
    obs = _observe(prom_url, "twice", {"job_name": JOB}, "tm_id")
    dup = [h for h in obs.holds if h.startswith("duplicate series")]
    assert len(dup) == 1 and "tm_1_2 is scraped 2×" in dup[0] and "instance=a:9249" in dup[0]


def test_busy_time_that_steps_back_is_not_read_as_a_restart(tmp_path):
    """`accumulateBusyTimeMs` is wall time minus the idle time counted so far, and an idle stretch is only counted
    when it ends (or at the 5 s view update): between two scrapes the value can step back. Measured on this
    machine: one TaskManager at 40 records/s, 1 s scrapes, 9 of 89 consecutive pairs stepped back (4,420 → 4,413
    among them), about 46 ms of busy time a second otherwise. `rate()` reads each step back as a counter reset and
    adds the whole value: the loop saw busy shares of 0.4 where the task was 5 % busy."""
    values = [4_236 + 46 * i for i in range(5)]
    values += [values[-1] - 7] + [values[-1] - 7 + 46 * i for i in range(1, 9)]  # one step back, as measured
    t0 = NOW - 600
    labels = f'job_name="{JOB}",task_name="work",tm_id="tm_1_2",subtask_index="0"'
    om = "# TYPE flink_taskmanager_job_task_accumulateBusyTimeMs gauge\n" + "".join(
        f"flink_taskmanager_job_task_accumulateBusyTimeMs{{{labels}}} {v} {t0 + i:.3f}\n" for i, v in enumerate(values)
    ) + "# EOF\n"
    queries = QuerySet(JOB, "flink", {"job_name": JOB}, {"topic": TOPIC}, {}, 12.0, 2.0, worker_label="tm_id")
    at = t0 + len(values) - 1
    with local_prometheus(tmp_path, openmetrics=om) as url:
        def value(query: str) -> float:
            result = requests.get(f"{url}/api/v1/query", params={"query": query, "time": at}, timeout=10).json()
            return float(result["data"]["result"][0]["value"][1])

        busy = value(queries.query("cpu"))
        naive = value(f"rate(flink_taskmanager_job_task_accumulateBusyTimeMs{{{labels}}}[12s]) / 1000")
    assert busy == pytest.approx(0.046, rel=0.2)
    assert naive > 0.3  # the reset reading the query avoids
