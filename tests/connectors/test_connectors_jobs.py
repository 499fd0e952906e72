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
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.ports import Target
from daedalus.runtime.ports import free_port

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


LABEL = ("must be a lowercase RFC 1123 label: lowercase letters, digits and '-', starting and ending with a letter "
         "or digit, at most 63 characters")
SUBDOMAIN = ("must be a lowercase RFC 1123 subdomain: RFC 1123 labels (lowercase letters, digits and '-', each "
             "starting and ending with a letter or digit) joined by '.', at most 253 characters")


@pytest.mark.parametrize(("target", "message"), [
    ({"namespace": "..", "name": "victim"}, f"field scale_target.namespace: '..' {LABEL}"),
    ({"namespace": "stream_ing", "name": "x"}, f"field scale_target.namespace: 'stream_ing' {LABEL}"),
    ({"namespace": "-x", "name": "x"}, f"field scale_target.namespace: '-x' {LABEL}"),
    ({"namespace": "n" * 64, "name": "x"}, f"field scale_target.namespace: '{'n' * 64}' {LABEL}"),
    ({"namespace": "streaming\n", "name": "x"}, f"field scale_target.namespace: 'streaming\\n' {LABEL}"),
    ({"name": "../victim"}, f"field scale_target.name: '../victim' {SUBDOMAIN}"),
    ({"name": "Flink-TM"}, f"field scale_target.name: 'Flink-TM' {SUBDOMAIN}"),
    ({"name": "a..b"}, f"field scale_target.name: 'a..b' {SUBDOMAIN}"),
    ({"name": "x" * 64}, f"field scale_target.name: '{'x' * 64}' {SUBDOMAIN}"),
    ({"name": ".".join(["x" * 63] * 4)}, f"field scale_target.name: '{'.'.join(['x' * 63] * 4)}' {SUBDOMAIN}"),
])
def test_scale_target_names_must_be_kubernetes_names(target, message):
    with pytest.raises(ConfigurationError) as err:
        _load(scale_target={"kind": "Deployment", **target})
    assert str(err.value) == f"jobs.yaml: job 'ysb' (jobs[0]), {message}"


def test_valid_kubernetes_names_pass():
    name = ".".join(["x" * 63] * 3) + "." + "y" * 61  # 253 characters
    spec = _load(scale_target={"kind": "Deployment", "namespace": "a" * 63, "name": name})
    assert spec.scale_target.name == name
    assert _load(scale_target={"kind": "StatefulSet", "name": "kafka-streams.v2"}).scale_target.namespace == "default"


def test_flink_field_is_refused_with_what_replaced_it():
    with pytest.raises(ConfigurationError) as err:
        _load(scale_target={"kind": "FlinkDeployment", "name": "ysb", "flink_field": "job.parallelism"})
    assert str(err.value).startswith("jobs.yaml: job 'ysb' (jobs[0]), field scale_target: flink_field was removed: a "
                                     "FlinkDeployment is scaled through its scale subresource, which sets "
                                     "spec.taskManager.replicas")


def test_credentials_in_the_prometheus_url_are_refused_without_repeating_them():
    with pytest.raises(ConfigurationError) as err:
        _load(prometheus={"url": "http://daedalus:s3cr3t-Pa55@prometheus.monitoring:9090"})
    text = str(err.value)
    assert text.startswith("jobs.yaml: job 'ysb' (jobs[0]), field prometheus.url: credentials do not belong in the "
                           "URL") and "set prometheus.auth" in text
    assert "s3cr3t" not in text and "daedalus:" not in text


@pytest.mark.parametrize(("prometheus", "message"), [
    ({"auth": {"kind": "bearer"}}, "field prometheus.auth.bearer: set exactly one of token_env"),
    ({"auth": {"kind": "bearer", "token_env": "T", "token_secret": "t"}}, "field prometheus.auth.bearer: set exactly"),
    ({"auth": {"kind": "basic", "username": "u"}}, "field prometheus.auth.basic: set exactly one of password_env"),
    ({"auth": {"kind": "basic", "password_env": "P"}}, "field prometheus.auth.basic.username: Field required"),
    ({"auth": {"kind": "bearer", "token_env": "PROM TOKEN"}},
     "field prometheus.auth.bearer.token_env: 'PROM TOKEN' is not an environment variable name"),
    ({"auth": {"kind": "bearer", "token_secret": "Prom_Token"}},
     "field prometheus.auth.bearer.token_secret: 'Prom_Token' is not a Prefect block name"),
    ({"auth": {"kind": "bearer", "token_env": "T", "username": "u"}},
     "field prometheus.auth.bearer.username: Extra inputs are not permitted"),
    ({"tls": {"ca_file": "/etc/ca.pem"}}, "field prometheus: tls is set for a plain http url"),
    ({"url": "https://p:9090", "tls": {"key_file": "/k.pem"}}, "field prometheus.tls: key_file is the key of a client"),
    ({"url": "https://p:9090", "tls": {"ca_file": "/ca.pem", "insecure_skip_verify": True}},
     "field prometheus.tls: ca_file and insecure_skip_verify: true contradict each other"),
    ({"deadline": 0}, "field prometheus.deadline: Input should be greater than 0"),
])
def test_prometheus_auth_and_tls_settings_are_checked_at_load(prometheus, message):
    with pytest.raises(ConfigurationError) as err:
        _load(prometheus={"url": "http://prometheus.monitoring:9090", **prometheus})
    assert str(err.value).startswith(f"jobs.yaml: job 'ysb' (jobs[0]), {message}"), str(err.value)


def test_credentials_are_read_when_the_source_is_built_not_when_the_file_loads(monkeypatch, tmp_path):
    monkeypatch.delenv("DAEDALUS_TEST_PROM_TOKEN", raising=False)
    spec = _load(prometheus={"url": "https://prometheus.monitoring:9090", "deadline": "30s",
                             "auth": {"kind": "bearer", "token_env": "DAEDALUS_TEST_PROM_TOKEN"}})
    assert spec.prometheus.deadline == 30.0
    with pytest.raises(ConfigurationError, match=r"^job 'ysb': field prometheus\.auth\.token_env: the environment "
                                                 r"variable DAEDALUS_TEST_PROM_TOKEN is not set"):
        PrometheusSource.from_spec(spec)
    monkeypatch.setenv("DAEDALUS_TEST_PROM_TOKEN", "t0k3n")
    assert PrometheusSource.from_spec(spec)._prom.headers == {"Authorization": "Bearer t0k3n"}
    monkeypatch.setenv("DAEDALUS_TEST_PROM_PASSWORD", "pa55")
    basic = _load(prometheus={"url": "https://p:9090", "auth": {"kind": "basic", "username": "daedalus",
                                                                "password_env": "DAEDALUS_TEST_PROM_PASSWORD"}})
    assert PrometheusSource.from_spec(basic)._prom.auth == ("daedalus", "pa55")
    missing = _load(prometheus={"url": "https://p:9090", "tls": {"ca_file": str(tmp_path / "nope.pem")}})
    with pytest.raises(ConfigurationError, match=r"^job 'ysb': field prometheus\.tls\.ca_file: no readable file at"):
        PrometheusSource.from_spec(missing)


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
