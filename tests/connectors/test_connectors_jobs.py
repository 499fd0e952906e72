"""Bad input: jobs-file entries for Prometheus/Kubernetes/spark-local targets fail at load time naming the job and
the field; an unreachable Prometheus or API server holds the loop and nothing is scaled."""

from __future__ import annotations

import pytest

from daedalus.connectors.jobs import parse_jobs
from daedalus.connectors.kubernetes import KubernetesScaler
from daedalus.connectors.prometheus import PrometheusSource
from daedalus.connectors.spark_local import SparkLocalScaler
from daedalus.models.config import LoopConfig
from daedalus.models.errors import ConfigurationError
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop import PLAIN, iterate
from daedalus.models.ports import Target
from daedalus.sim.exporter import free_port

GOOD = {"name": "ysb", "engine": "flink", "prometheus": {"url": "http://prometheus.monitoring:9090"},
        "selector": {"namespace": "streaming"}, "source": {"topic": "ad-events"},
        "scale_target": {"kind": "Deployment", "namespace": "streaming", "name": "flink-taskmanager"}}


def _load(**changes):
    entry = {**GOOD, **changes}
    return parse_jobs({"jobs": [entry]}, "jobs.yaml").job(entry["name"])


@pytest.mark.parametrize(("changes", "where"), [
    ({"engine": "storm"}, "job 'ysb' (jobs[0]), field engine"),
    ({"selector": {}}, "job 'ysb' (jobs[0]), field selector: engine 'flink' needs labels"),
    ({"prometheus": {"url": "not a url"}}, "job 'ysb' (jobs[0]), field prometheus.url"),
    ({"scale_target": {"kind": "ReplicaSet", "name": "x"}}, "job 'ysb' (jobs[0]), field scale_target.kind"),
])
def test_schema_errors_name_the_file_job_and_field(changes, where):
    with pytest.raises(ConfigurationError) as err:
        _load(**changes)
    assert str(err.value).startswith(f"jobs.yaml: {where}")


def test_connector_errors_name_the_job_and_field():
    # PromQL templates render while the jobs file loads, so these fail at load time.
    with pytest.raises(ConfigurationError, match=r"job 'ysb' \(jobs\[0\]\), field source\.topic: missing"):
        _load(source={})
    with pytest.raises(ConfigurationError, match=r"field selector\.app-name: not a Prometheus label name"):
        _load(selector={"app-name": "x"})
    with pytest.raises(ConfigurationError, match=r"job 'ysb' \(jobs\[0\]\), field queries\.throughputs: not a query"):
        _load(queries={"throughputs": "x"})
    with pytest.raises(ConfigurationError, match=r"job 'ysb': field prometheus\.step: whole seconds"):
        PrometheusSource.from_spec(_load(prometheus={"url": "http://p:9090", "step": "1500ms"}))
    with pytest.raises(ConfigurationError, match=r"job 'ysb': field scale_target\.path: a spark-local target needs"):
        SparkLocalScaler.from_spec(_load(scale_target={"kind": "spark-local", "name": "clicks"}))
    with pytest.raises(ConfigurationError, match=r"job 'ysb': field scale_target\.kind: 'spark-local' is not a "):
        KubernetesScaler.from_spec(_load(scale_target={"kind": "spark-local", "name": "clicks", "path": "/x"}))


def test_unreachable_prometheus_and_api_server_hold_the_loop_and_scale_nothing(monkeypatch):
    from kubernetes import client

    spec = _load(prometheus={"url": f"http://127.0.0.1:{free_port()}", "retries": 0, "timeout": 1})
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{free_port()}"))
    api.configuration.retries = 0
    scaler = KubernetesScaler("Deployment", "streaming", "flink-taskmanager", api, attempts=1, sleep=lambda s: None)
    cfg = LoopConfig()

    class Clock:
        def now(self) -> float:
            return 1_795_000_000.0

    target = Target("ysb", PrometheusSource.from_spec(spec), scaler, Clock(), cfg)
    knowledge = Knowledge.new("ysb", cfg)
    it = iterate(target, knowledge, PLAIN)
    assert it.decision.kind == "hold" and it.action is None
    assert any(r.startswith("metrics unavailable: prometheus http://127.0.0.1:") and "unreachable" in r
               for r in it.decision.reasons), it.decision.reasons
    assert knowledge.ledger == [] or all(e.state not in ("executed", "dry-run") for e in knowledge.ledger)
