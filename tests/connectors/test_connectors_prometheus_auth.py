"""Credentials and TLS for Prometheus: against a real Prometheus serving https only with basic auth, and a
loopback server that records the Authorization header. A password or token never shows in a ConnectorError,
hence never in a hold, a log, an artifact or a status file; TLS is verified unless told otherwise."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest
from connectors_support import PASSWORD, USER, needs_prometheus, secured_prometheus

from daedalus.connectors.fields import redact
from daedalus.connectors.jobs import parse_jobs
from daedalus.connectors.prometheus import PrometheusSource
from daedalus.connectors.promql import KEYS, QuerySet
from daedalus.models.errors import ConfigurationError, ConnectorError
from daedalus.models.loop.monitor import observe_or_hold

T0 = (int(time.time()) - 3600) // 60 * 60
SINCE, UNTIL = T0 + 60, T0 + 300
PODS = ("tm-0", "tm-1")


def _openmetrics() -> str:
    """One sound two-TaskManager Flink job in namespace `ok`, every 15 s for 5 minutes."""
    rows: dict[str, list[str]] = {}
    for i, t in enumerate(range(T0, T0 + 301, 15)):
        for k, pod in enumerate(PODS):
            labels = f'namespace="ok",cluster="c1",pod="{pod}"'
            rows.setdefault("flink_taskmanager_job_task_operator_numRecordsOutPerSecond", []).append(
                f'{{{labels},operator_name="Source: events"}} {1000 * (k + 1)} {t}')
            rows.setdefault("flink_taskmanager_Status_JVM_CPU_Load", []).append(f"{{{labels}}} 0.5 {t}")
            rows.setdefault("flink_taskmanager_job_task_operator_pendingRecords", []).append(f"{{{labels}}} 10 {t}")
        job = 'namespace="ok",cluster="c1"'
        rows.setdefault("flink_jobmanager_numRegisteredTaskManagers", []).append(f"{{{job}}} 2 {t}")
        rows.setdefault("flink_jobmanager_job_uptime", []).append(f"{{{job}}} {600000 + 15000 * i} {t}")
        rows.setdefault("kafka_server_brokertopicmetrics_messagesin_total", []).append(
            f'{{topic="ok-events"}} {15000 * i} {t}')
    lines = []
    for name, samples in rows.items():
        family = name.removesuffix("_total")
        lines.append(f"# TYPE {family} {'counter' if name.endswith('_total') else 'gauge'}")
        lines += [name + s for s in sorted(samples, key=lambda s: (s.split("}")[0], int(s.rsplit(" ", 1)[1])))]
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with secured_prometheus(tmp_path_factory.mktemp("prom"), _openmetrics()) as (url, ca):
        yield url, ca


def _spec(url: str, **prometheus):
    return parse_jobs({"jobs": [{"name": "ok", "engine": "flink", "prometheus": {"url": url, **prometheus},
                                 "selector": {"namespace": "ok", "cluster": "c1"}, "source": {"topic": "ok-events"},
                                 "scale_target": {"kind": "Deployment", "name": "flink-taskmanager"}}]}).job("ok")


def _hold(source: PrometheusSource) -> str:
    obs = observe_or_hold("ok", source, SINCE, UNTIL, scaleout=2, call=lambda j, s, a, b: s.observe(j, a, b))
    assert obs.timestamps.size == 0 and len(obs.holds) == 1, obs.holds
    return obs.holds[0]


def test_redact_removes_the_user_info_of_every_url_in_a_text():
    assert redact("http://u:p@h:9090") == "http://***@h:9090"
    assert redact("Failed to parse: https://daedalus:pa@ss@127.0.0.1:99999/api, then http://x/y") == (
        "Failed to parse: https://***@127.0.0.1:99999/api, then http://x/y")
    assert redact("prometheus http://prometheus.monitoring:9090 (user@example.com)") == (
        "prometheus http://prometheus.monitoring:9090 (user@example.com)")


@needs_prometheus
@pytest.mark.slow
def test_basic_auth_from_the_environment_over_verified_tls(secured, monkeypatch):
    url, ca = secured
    monkeypatch.setenv("DAEDALUS_TEST_PROM_PASSWORD", PASSWORD)
    auth = {"kind": "basic", "username": USER, "password_env": "DAEDALUS_TEST_PROM_PASSWORD"}
    spec = _spec(url, step="15s", auth=auth, tls={"ca_file": str(ca)})
    obs = PrometheusSource.from_spec(spec).observe("ok", SINCE, UNTIL)
    assert obs.holds == () and obs.scaleout == 2 and set(obs.throughput) == set(PODS)


@needs_prometheus
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")  # insecure_skip_verify, as asked
def test_tls_is_verified_by_default(secured, monkeypatch):
    url, _ = secured
    monkeypatch.setenv("DAEDALUS_TEST_PROM_PASSWORD", PASSWORD)
    auth = {"kind": "basic", "username": USER, "password_env": "DAEDALUS_TEST_PROM_PASSWORD"}
    hold = _hold(PrometheusSource.from_spec(_spec(url, step="15s", retries=0, auth=auth)))
    assert "SSLError" in hold and "certificate verify failed" in hold
    insecure = _spec(url, step="15s", auth=auth, tls={"insecure_skip_verify": True})
    assert PrometheusSource.from_spec(insecure).observe("ok", SINCE, UNTIL).holds == ()


@needs_prometheus
@pytest.mark.slow
def test_a_wrong_password_in_the_url_never_shows(secured):
    url, ca = secured
    wrong = url.replace("https://", f"https://{USER}:wr0ng-Pa55w0rd@")
    queries = QuerySet("ok", "flink", {"namespace": "ok", "cluster": "c1"}, {"topic": "ok-events"}, {}, 60)
    hold = _hold(PrometheusSource("ok", queries, wrong, step_s=15, retries=0, verify=str(ca)))
    assert "HTTP Status Code 401" in hold, hold
    assert "wr0ng-Pa55w0rd" not in hold and f"prometheus https://***@{url.removeprefix('https://')}" in hold
    # An error text of the HTTP library itself carries the whole URL: it is redacted too.
    bad_port = f"http://{USER}:wr0ng-Pa55w0rd@127.0.0.1:99999"
    with pytest.raises(ConnectorError) as err:
        PrometheusSource("ok", queries, bad_port, step_s=15, retries=0).observe("ok", SINCE, UNTIL)
    assert "InvalidURL: Failed to parse: http://***@127.0.0.1:99999" in str(err.value)
    assert "wr0ng" not in str(err.value) and err.value.__cause__ is None and err.value.__suppress_context__


# --- a bearer token, recorded by a loopback server that answers like Prometheus ----------------------------

class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []

    def do_GET(self):
        type(self).seen.append(self.headers.get("Authorization"))
        query = parse_qs(urlparse(self.path).query)
        start = float(query.get("start", query.get("time", ["1000"]))[0])
        series = [] if "count by (pod)" in query["query"][0] else [{"metric": {"pod": "tm-0"},
                                                                    "values": [[start, "1"]], "value": [start, "1"]}]
        body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Recorder.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_bearer_token_from_the_environment_is_sent_with_every_query(recorder, monkeypatch):
    monkeypatch.setenv("DAEDALUS_TEST_PROM_TOKEN", "t0k3n-from-env")
    spec = _spec(recorder, step="15s", auth={"kind": "bearer", "token_env": "DAEDALUS_TEST_PROM_TOKEN"})
    obs = PrometheusSource.from_spec(spec).observe("ok", SINCE, UNTIL)
    assert obs.scaleout == 1
    # one request per query of the engine (promql.KEYS), every one with the token
    assert len(_Recorder.seen) == len(KEYS) and set(_Recorder.seen) == {"Bearer t0k3n-from-env"}


@pytest.mark.slow  # the Prefect test harness starts a server
def test_a_bearer_token_from_a_prefect_secret_block(recorder, prefect_harness):
    from prefect.blocks.system import Secret

    Secret(value="t0k3n-from-block").save("daedalus-test-prom-token", overwrite=True)
    spec = _spec(recorder, step="15s", auth={"kind": "bearer", "token_secret": "daedalus-test-prom-token"})
    PrometheusSource.from_spec(spec).observe("ok", SINCE, UNTIL)
    assert set(_Recorder.seen) == {"Bearer t0k3n-from-block"}
    missing = _spec(recorder, auth={"kind": "bearer", "token_secret": "no-such-block"})
    with pytest.raises(ConfigurationError, match=r"^job 'ok': field prometheus\.auth\.token_secret: cannot load the "
                                                 r"Prefect Secret block 'no-such-block'"):
        PrometheusSource.from_spec(missing)
