"""The Prometheus monitor against a real Prometheus holding backfilled Flink metrics (promtool), and against a
loopback HTTP server that fails on purpose (5xx, timeouts).

Each case is one namespace in the same backfill: 3 TaskManager pods sampled every 15 s for 10 minutes, with
values chosen so the expected Observation can be written down by hand.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import quote as url_quote

import numpy as np
import pytest
import requests
from connectors_support import needs_prometheus

from daedalus.connectors.jobs import parse_jobs
from daedalus.connectors.prometheus import PrometheusSource, _Budget
from daedalus.connectors.promql import QuerySet
from daedalus.models.errors import ConnectorError
from daedalus.models.loop.monitor import observe_or_hold
from daedalus.runtime.ports import free_port
from daedalus.runtime.prometheus import local_prometheus

STEP = 15
T0 = (int(time.time()) - 7200) // 60 * 60  # two hours ago, on a minute
SINCE, UNTIL = T0 + 60, T0 + 600
GRID = np.arange(SINCE + STEP, UNTIL + 1, STEP, dtype=float)
PODS = ("tm-0", "tm-1", "tm-2")


def _case(ns: str) -> dict:
    """Per namespace, the deviations from the normal job."""
    return {
        "ok": {},
        "partial": {"cpu_gap": ("tm-1", T0 + 300, T0 + 345)},  # tm-1 misses CPU samples at 300..345
        "onlythroughput": {"no_cpu": "tm-2"},
        "stale": {"stops": ("tm-2", T0 + 450)},  # tm-2 stops reporting, the job still counts 3 TaskManagers
        "scalein": {"stops": ("tm-2", T0 + 450), "tms_after": (T0 + 450, 2)},  # tm-2 removed by a scale-in
        "nan": {"nan_cpu": ("tm-0", T0 + 510)},
        "reset": {"reset_at": T0 + 480},
        "subtasks": {"subtasks": 2},  # each TaskManager runs two source subtasks: two throughput series per pod
        "dup": {"subtasks": 2, "dup": ("tm-1", ("a:9249", "b:9249"))},  # and tm-1 is scraped by two targets
    }[ns]


CASES = ("ok", "partial", "onlythroughput", "stale", "scalein", "nan", "reset", "subtasks", "dup")
REGEX_PROBE = {".*": 1, "anything": 2, "x": 4}  # app label value → sample value


def _openmetrics() -> str:
    times = range(T0, T0 + 601, STEP)
    fam: dict[str, list[str]] = {k: [] for k in ("thr", "cpu", "lag", "tms", "up", "msg", "probe")}
    for ns in CASES:
        c = _case(ns)
        subtasks = c.get("subtasks", 1)
        for k, pod in enumerate(PODS):
            dup = c.get("dup")
            for i, t in enumerate(times):
                if "stops" in c and c["stops"][0] == pod and t >= c["stops"][1]:
                    continue
                for instance in dup[1] if dup and dup[0] == pod else (None,):
                    labels = f'namespace="{ns}",cluster="c1",pod="{pod}"'
                    labels += f',instance="{instance}"' if instance else ""
                    for st in range(subtasks):
                        sub = f',subtask_index="{st}"' if subtasks > 1 else ""
                        fam["thr"].append(f'flink_taskmanager_job_task_operator_numRecordsOutPerSecond{{{labels},'
                                          f'operator_name="Source: events"{sub}}} {(1000 * (k + 1) + i) / subtasks:g} '
                                          f"{t}")
                    gap = c.get("cpu_gap")
                    if c.get("no_cpu") != pod and not (gap and gap[0] == pod and gap[1] <= t <= gap[2]):
                        nan = c.get("nan_cpu")
                        value = "NaN" if nan and nan == (pod, t) else f"{0.1 * (k + 1) + 0.001 * i:.3f}"
                        fam["cpu"].append(f"flink_taskmanager_Status_JVM_CPU_Load{{{labels}}} {value} {t}")
                    fam["lag"].append(f"flink_taskmanager_job_task_operator_pendingRecords{{{labels}}} "
                                      f"{10 * (k + 1)} {t}")
        for i, t in enumerate(times):
            after = c.get("tms_after")
            tms = after[1] if after and t >= after[0] else 3
            fam["tms"].append(f'flink_jobmanager_numRegisteredTaskManagers{{namespace="{ns}",cluster="c1"}} {tms} {t}')
            fam["up"].append(f'flink_jobmanager_job_uptime{{namespace="{ns}",cluster="c1"}} {600000 + i * 15000} {t}')
            count = 15 * 1000 * i
            if c.get("reset_at") is not None and t >= c["reset_at"]:
                count = 15 * 1000 * (i - (c["reset_at"] - T0) // STEP)
            fam["msg"].append(f'kafka_server_brokertopicmetrics_messagesin_total{{topic="{ns}-events"}} {count} {t}')
    for app, value in REGEX_PROBE.items():
        fam["probe"] += [f'daedalus_regex_probe{{app="{app}"}} {value} {t}' for t in times]
    types = {"thr": ("flink_taskmanager_job_task_operator_numRecordsOutPerSecond", "gauge"),
             "cpu": ("flink_taskmanager_Status_JVM_CPU_Load", "gauge"),
             "lag": ("flink_taskmanager_job_task_operator_pendingRecords", "gauge"),
             "tms": ("flink_jobmanager_numRegisteredTaskManagers", "gauge"),
             "up": ("flink_jobmanager_job_uptime", "gauge"),
             "msg": ("kafka_server_brokertopicmetrics_messagesin", "counter"),
             "probe": ("daedalus_regex_probe", "gauge")}
    lines = []
    for key, (name, kind) in types.items():
        lines.append(f"# TYPE {name} {kind}")
        lines += sorted(fam[key], key=lambda s: (s.rsplit("{", 1)[0], s.split("}")[0], int(s.rsplit(" ", 1)[1])))
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory):
    with local_prometheus(tmp_path_factory.mktemp("prom"), openmetrics=_openmetrics()) as url:
        yield url


def _source(url: str, ns: str, **kw) -> PrometheusSource:
    queries = QuerySet(ns, "flink", {"namespace": ns, "cluster": "c1"}, {"topic": f"{ns}-events"}, {}, 4 * STEP,
                       2 * STEP)
    return PrometheusSource(ns, queries, url, step_s=STEP, **kw)


pytestmark = [needs_prometheus, pytest.mark.slow]


def test_a_sound_job_gives_the_hand_computed_observation(prom_url):
    obs = _source(prom_url, "ok").observe("ok", SINCE, UNTIL)
    assert obs.holds == ()
    np.testing.assert_array_equal(obs.timestamps, GRID)
    i = (GRID - T0) / STEP  # sample index at each grid point
    for k, pod in enumerate(PODS):
        np.testing.assert_allclose(obs.throughput[pod], 1000 * (k + 1) + i)
        np.testing.assert_allclose(obs.cpu[pod], np.round(0.1 * (k + 1) + 0.001 * i, 3))
    np.testing.assert_allclose(obs.workload, 1000.0)  # 15,000 messages per 15 s
    np.testing.assert_allclose(obs.lag, 10 + 20 + 30)
    np.testing.assert_allclose(obs.uptime_s, 600 + i * 15)
    assert obs.scaleout == 3 and obs.step_s == STEP


def test_the_grid_is_aligned_so_loops_neither_overlap_nor_skip(prom_url):
    src = _source(prom_url, "ok")
    first = src.observe("ok", SINCE + 7, SINCE + 200)
    second = src.observe("ok", SINCE + 200, UNTIL)
    assert first.timestamps[0] == SINCE + 15 and first.timestamps[-1] == SINCE + 195
    assert second.timestamps[0] == SINCE + 210
    np.testing.assert_array_equal(np.concatenate([first.timestamps, second.timestamps]), GRID)
    assert src.observe("ok", UNTIL, UNTIL + 5).timestamps.size == 0  # nothing new: an empty observation


def test_partial_series_hold(prom_url):
    obs = _source(prom_url, "partial").observe("partial", SINCE, UNTIL)
    # Prometheus carries the sample of 285 forward (5 min lookback); none within 30 s at 330 and 345.
    assert obs.holds == ("partial: pod tm-1 has no sample at 2 steps between its first and last",)
    missing = (GRID >= T0 + 330) & (GRID <= T0 + 345)
    assert np.isnan(obs.cpu["tm-1"][missing]).all() and np.isnan(obs.throughput["tm-1"][missing]).all()
    only = _source(prom_url, "onlythroughput").observe("onlythroughput", SINCE, UNTIL)
    assert only.holds == ("partial: pod tm-2 reports throughput only",)
    assert set(only.throughput) == {"tm-0", "tm-1"}


def test_a_stale_series_is_masked_and_holds_while_the_job_still_counts_the_pod(prom_url):
    obs = _source(prom_url, "stale").observe("stale", SINCE, UNTIL)
    # Prometheus repeats tm-2's last sample (435) for 5 minutes; from 480 on it has none within 30 s.
    assert obs.holds == (f"stale: pod tm-2 has no sample within 30s of {UNTIL} (last at {T0 + 465}) while the job "
                         "counts 3 workers: pod gone or not scraped",)
    fresh = GRID <= T0 + 435 + 30
    assert np.isfinite(obs.throughput["tm-2"][fresh]).all() and np.isnan(obs.throughput["tm-2"][~fresh]).all()


def test_a_pod_removed_by_a_scale_in_is_masked_without_a_hold(prom_url):
    obs = _source(prom_url, "scalein").observe("scalein", SINCE, UNTIL)
    assert obs.holds == () and obs.scaleout == 2
    assert np.isnan(obs.throughput["tm-2"][GRID > T0 + 465]).all()


def test_nan_and_counter_resets_hold(prom_url):
    nan = _source(prom_url, "nan").observe("nan", SINCE, UNTIL)
    assert nan.holds == ("NaN: pod tm-0 reports NaN throughput or CPU at 1 steps",)
    reset = _source(prom_url, "reset").observe("reset", SINCE, UNTIL)
    assert len(reset.holds) == 1 and reset.holds[0].startswith("counter reset: 1 reset(s) within the last 540 s")


def test_no_data_names_the_query(prom_url):
    queries = QuerySet("x", "flink", {"namespace": "ok", "cluster": "c1"}, {"topic": "no-such-topic"}, {}, 60)
    obs = PrometheusSource("x", queries, prom_url, step_s=STEP).observe("x", SINCE, UNTIL)
    assert obs.holds[0].startswith('no data for workload: `sum(rate(kafka_server_brokertopicmetrics_messagesin_total'
                                   '{topic="no-such-topic"}[60s]))` matched no series')
    with pytest.raises(ConnectorError, match="no current scaleout; no data for workload"):
        _source(prom_url, "nosuchjob").observe("nosuchjob", SINCE, UNTIL)


def test_an_injection_attempt_matches_nothing(prom_url):
    evil = 'ok", cluster=~".+'
    queries = QuerySet("x", "flink", {"namespace": evil}, {"topic": "ok-events"}, {}, 60)
    with pytest.raises(ConnectorError, match="no current scaleout"):
        PrometheusSource("x", queries, prom_url, step_s=STEP).observe("x", SINCE, UNTIL)


def test_several_subtasks_per_pod_are_summed_and_are_not_duplicates(prom_url):
    obs = _source(prom_url, "subtasks").observe("subtasks", SINCE, UNTIL)
    assert obs.holds == ()
    i = (GRID - T0) / STEP
    for k, pod in enumerate(PODS):
        np.testing.assert_allclose(obs.throughput[pod], 1000 * (k + 1) + i)


def test_a_pod_scraped_twice_holds_naming_the_labels_that_differ(prom_url):
    obs = _source(prom_url, "dup").observe("dup", SINCE, UNTIL)
    assert obs.holds == ("duplicate series: pod tm-1 is scraped 2× (instance=a:9249, instance=b:9249): its throughput "
                         "would count more than once; fix the scrape config (one scrape job and target per pod)",)
    i = (GRID - T0) / STEP
    np.testing.assert_allclose(obs.throughput["tm-1"], 2 * (2000 + i))  # what the hold keeps the loop from using


def test_a_selector_value_in_a_regex_matcher_matches_only_itself(prom_url):
    template = "sum(daedalus_regex_probe{app=~${selector.app}})"
    rendered = QuerySet("x", "flink", {"app": ".*"}, {"topic": "t"}, {"lag": template}, 60).query("lag")
    assert rendered == r'sum(daedalus_regex_probe{app=~"\\.\\*"})'

    def value(query: str) -> float:
        answer = requests.get(f"{prom_url}/api/v1/query?query={url_quote(query)}&time={UNTIL}", timeout=10).json()
        return float(answer["data"]["result"][0]["value"][1])

    assert value(rendered) == REGEX_PROBE[".*"]  # the series literally named `.*`, and no other
    assert value('sum(daedalus_regex_probe{app=~".*"})') == sum(REGEX_PROBE.values())  # unescaped: all of them


def test_from_spec_builds_the_source_from_a_jobs_file_entry(prom_url):
    jobs = parse_jobs({"jobs": [{"name": "ok", "engine": "flink", "prometheus": {"url": prom_url, "step": "15s"},
                                 "selector": {"namespace": "ok", "cluster": "c1"}, "source": {"topic": "ok-events"},
                                 "scale_target": {"kind": "Deployment", "name": "flink-taskmanager"}}]})
    obs = PrometheusSource.from_spec(jobs.job("ok")).observe("ok", SINCE, UNTIL)
    assert obs.holds == () and obs.scaleout == 3


# --- failures of Prometheus itself: a loopback server that answers 5xx or too slowly ---------------------

class _Flaky(BaseHTTPRequestHandler):
    script: ClassVar[list[tuple[int, float]]] = []  # (status, delay) per request; then the last entry forever
    hits = 0

    def do_GET(self):
        cls = type(self)
        status, delay = cls.script[min(cls.hits, len(cls.script) - 1)]
        cls.hits += 1
        time.sleep(delay)
        body = (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},'
                b'"values":[[1000,"2"]]}]}}' if status == 200 else b'{"status":"error","error":"overloaded"}')
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Flaky.hits = 0
    try:
        yield server, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _fast(url: str, **kw) -> PrometheusSource:
    queries = QuerySet("j", "flink", {"namespace": "n"}, {"topic": "t"}, {}, 60)
    return PrometheusSource("j", queries, url, step_s=1, backoff_s=0.01, **kw)


def test_5xx_is_retried_a_bounded_number_of_times(flaky):
    _, url = flaky
    _Flaky.script = [(503, 0.0), (502, 0.0), (200, 0.0)]
    assert _fast(url, retries=3)._range("workload", _Budget(time.monotonic() + 10), 999, 1000, 1)[0]["values"] == [
        [1000, "2"]]
    assert _Flaky.hits == 3
    _Flaky.hits, _Flaky.script = 0, [(500, 0.0)]
    with pytest.raises(ConnectorError, match=r"the workload query failed \(HTTP Status Code 500"):
        _fast(url, retries=2)._range("workload", _Budget(time.monotonic() + 10), 999, 1000, 1)
    assert _Flaky.hits == 3  # the first try and 2 retries, no more


def test_a_timeout_becomes_a_hold_in_the_monitor_phase(flaky):
    _, url = flaky
    _Flaky.script = [(200, 1.0)]
    obs = observe_or_hold("j", _fast(url, retries=1, timeout_s=0.2), 990, 1000, scaleout=4, call=lambda j, s, a, b:
                          s.observe(j, a, b))
    assert obs.scaleout == 4 and obs.timestamps.size == 0
    assert obs.holds[0].startswith(f"metrics unavailable: prometheus {url} unreachable or timing out after 1 retries")


def _prometheus_threads(job: str = "j") -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"prometheus-{job}")]


@pytest.mark.parametrize("deadline", [1.0, 2.5])
def test_a_slow_prometheus_is_given_up_at_the_deadline_with_nothing_left_running(flaky, deadline):
    _, url = flaky
    _Flaky.script = [(200, 8.0)]  # every answer comes long after the per-request timeout and the deadline
    source = _fast(url, retries=3, timeout_s=10.0, deadline_s=deadline)
    started = time.monotonic()
    with pytest.raises(ConnectorError) as err:
        source.observe("j", 990, 1000)
    elapsed = time.monotonic() - started
    assert str(err.value).startswith(f"metrics too slow: prometheus {url} did not answer the ")
    assert str(err.value).endswith(f"within the observation's deadline of {deadline:g} s (prometheus.deadline)")
    assert deadline - 0.05 <= elapsed <= deadline + 0.5
    while _prometheus_threads() and time.monotonic() - started < deadline + 0.5:
        time.sleep(0.01)
    assert _prometheus_threads() == [], "a query outlived the observation's deadline"
    assert _Flaky.hits <= 4  # 4 requests in flight at once, none started after the deadline


def test_retries_and_backoff_stay_within_the_deadline(flaky):
    _, url = flaky
    _Flaky.script = [(503, 0.2)]  # slow failures: 10 retries with 0.3 s backoff would take far longer
    source = PrometheusSource("j", QuerySet("j", "flink", {"namespace": "n"}, {"topic": "t"}, {}, 60), url, step_s=1,
                              retries=10, backoff_s=0.3, deadline_s=1.5)
    started = time.monotonic()
    obs = observe_or_hold("j", source, 990, 1000, scaleout=3, call=lambda j, s, a, b: s.observe(j, a, b))
    assert time.monotonic() - started <= 1.5 + 0.5
    assert obs.holds[0].startswith(f"metrics unavailable: metrics too slow: prometheus {url} did not answer")


def test_an_unreachable_prometheus_holds():
    url = f"http://127.0.0.1:{free_port()}"
    obs = observe_or_hold("j", _fast(url, retries=0), 990, 1000, scaleout=2, call=lambda j, s, a, b:
                          s.observe(j, a, b))
    assert "unreachable or timing out after 0 retries (ConnectionError" in obs.holds[0]
    assert math.isnan(obs.end)


def test_observe_shows_what_the_loop_would_see(prom_url, tmp_path):
    from typer.testing import CliRunner

    from daedalus.cli.main import app

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"""
jobs:
  - name: stale
    engine: flink
    prometheus: {{url: "{prom_url}", step: 15s}}
    selector: {{namespace: stale, cluster: c1}}
    source: {{topic: stale-events}}
    scale_target: {{kind: Deployment, namespace: streaming, name: flink-taskmanager}}
""")
    out = tmp_path / "seen.json"
    result = CliRunner().invoke(app, ["observe", "stale", "--jobs-file", str(jobs), "--json", str(out),
                                      "--window", str(UNTIL - SINCE), "--at", str(UNTIL)])
    assert result.exit_code == 0, result.output
    seen = __import__("json").loads(out.read_text())
    assert seen["scaleout"] == 3 and seen["timestamps"] == GRID.tolist()
    assert seen["workers"]["tm-0"]["throughput"][0] == 1000 + 5
    assert seen["workload"][0] == 1000.0 and seen["lag"][0] == 60.0
    assert seen["holds"][0].startswith("stale: pod tm-2 has no sample within 30s")
    # busy time, or (this capture has none) the JVM's CPU load: connectors/promql.py
    sel = 'cluster="c1", namespace="stale"'
    assert seen["queries"]["cpu"] == (
        f"clamp_max(max by (pod) (deriv(flink_taskmanager_job_task_accumulateBusyTimeMs{{{sel}}}[60s])) / 1000, 1) "
        f"or (clamp_max(max by (pod) (flink_taskmanager_job_task_busyTimeMsPerSecond{{{sel}}}) / 1000, 1) "
        f"unless on () count(flink_taskmanager_job_task_accumulateBusyTimeMs{{{sel}}})) "
        f"or (max by (pod) (flink_taskmanager_Status_JVM_CPU_Load{{{sel}}}) "
        f"unless on () count(flink_taskmanager_job_task_busyTimeMsPerSecond{{{sel}}}))")
    assert "The loop would hold" in result.output
