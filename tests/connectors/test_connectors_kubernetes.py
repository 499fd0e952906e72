"""The Kubernetes executor against a loopback HTTP server speaking the API endpoints it may use (fake_kube.py),
which authorizes every request against the Role of deployments/k8s/rbac.yaml: the exact requests it sends,
scale subresources only, idempotence on the value, dry run, conflicts, refusals, retries, readiness."""

from __future__ import annotations

import pytest
import yaml
from fake_kube import RBAC, FakeKube, Fault, Server
from kubernetes import client

from daedalus.connectors.jobs import parse_jobs
from daedalus.connectors.kubernetes import KubernetesScaler
from daedalus.models.config import LoopConfig
from daedalus.models.errors import ConfigurationError, ConnectorError
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.execute import apply
from daedalus.models.types import Decision

DEP = "/apis/apps/v1/namespaces/streaming/deployments/flink-taskmanager"
STS = "/apis/apps/v1/namespaces/streaming/statefulsets/wordcount"
FLINK = "/apis/flink.apache.org/v1beta1/namespaces/streaming/flinkdeployments/ysb"
SPARK = "/apis/sparkoperator.k8s.io/v1beta2/namespaces/streaming/sparkapplications/clicks"
MERGE = "application/merge-patch+json"


@pytest.fixture
def kube():
    fake = FakeKube()
    for plural in ("deployments", "statefulsets"):
        name = "flink-taskmanager" if plural == "deployments" else "wordcount"
        fake.add("apps", "v1", plural, {"apiVersion": "apps/v1", "kind": plural.title()[:-1],
                                         "metadata": {"name": name, "namespace": "streaming"},
                                         "spec": {"replicas": 4, "selector": {"matchLabels": {"app": name}},
                                                  "template": {"metadata": {"labels": {"app": name}},
                                                               "spec": {"containers": [{"name": "main",
                                                                                        "image": "flink:1.20"}]}}},
                                         "status": {"replicas": 4, "readyReplicas": 4}})
    fake.add("flink.apache.org", "v1beta1", "flinkdeployments", {
        "apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
        "metadata": {"name": "ysb", "namespace": "streaming"},
        "spec": {"job": {"parallelism": 4}, "taskManager": {"replicas": 2}},
        "status": {"lifecycleState": "STABLE", "jobStatus": {"state": "RUNNING"}, "taskManager": {"replicas": 2}}})
    fake.add("sparkoperator.k8s.io", "v1beta2", "sparkapplications", {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": "clicks", "namespace": "streaming"}, "spec": {"executor": {"instances": 2}},
        "status": {"applicationState": {"state": "RUNNING"}, "executorInstances": 2}})
    server = Server(fake)
    try:
        yield fake, server.url
    finally:
        server.close()


def _scaler(url: str, kind: str = "Deployment", name: str = "flink-taskmanager", sleeps: list | None = None,
            **kw) -> KubernetesScaler:
    api = client.ApiClient(client.Configuration(host=url))
    record = sleeps if sleeps is not None else []
    return KubernetesScaler(kind, "streaming", name, api, sleep=record.append, **kw)


def _only_scale_subresources(fake: FakeKube) -> None:
    assert fake.requests and all(r.path.endswith("/scale") and r.code != 403 for r in fake.requests), [
        (r.method, r.path, r.code) for r in fake.requests]


def test_a_deployment_is_scaled_through_its_scale_subresource_and_nothing_else(kube):
    fake, url = kube
    message = _scaler(url).scale("ysb", 6, "d-1")
    assert message.startswith("scaled Deployment streaming/flink-taskmanager 4 → 6 (decision d-1); ready after")
    assert [(w.path, w.content_type, w.body, w.query) for w in fake.writes()] == [
        (DEP + "/scale", MERGE, {"metadata": {"resourceVersion": "101"}, "spec": {"replicas": 6}}, {}),
    ]
    assert fake.requests[0].method == "GET" and fake.requests[0].path == DEP + "/scale"
    assert fake.objects[DEP]["spec"]["replicas"] == 6 and "annotations" not in fake.objects[DEP]["metadata"]
    assert _scaler(url).current("ysb") == 6
    _only_scale_subresources(fake)


def test_scaling_to_the_scale_out_it_already_has_patches_nothing(kube):
    fake, url = kube
    _scaler(url).scale("ysb", 6, "d-1")
    message = _scaler(url).scale("ysb", 6, "d-1")
    assert message == "Deployment streaming/flink-taskmanager already at 6: nothing to patch (decision d-1)"
    assert _scaler(url).scale("ysb", 6, "d-2", dry_run=True).endswith("already at 6: nothing to patch (decision d-2)")
    assert len(fake.writes()) == 1


def test_dry_run_is_server_side_and_changes_nothing(kube):
    fake, url = kube
    message = _scaler(url).scale("ysb", 8, "d-2", dry_run=True)
    assert message == "dry run accepted by the API server: would scale Deployment streaming/flink-taskmanager 4 → 8"
    assert [(w.path, w.query) for w in fake.writes()] == [(DEP + "/scale", {"dryRun": ["All"]})]
    assert fake.objects[DEP]["spec"]["replicas"] == 4


def test_a_conflict_is_read_again_and_retried(kube):
    fake, url = kube
    fake.faults.append(Fault("PATCH", "/scale", 409, 'Operation cannot be fulfilled on deployments.apps '
                                                    '"flink-taskmanager": the object has been modified'))
    assert _scaler(url).scale("ysb", 6, "d-3").startswith("scaled")
    reads = [r for r in fake.requests if r.method == "GET"]
    assert len(fake.writes()) == 2 and len(reads) >= 2
    assert fake.objects[DEP]["spec"]["replicas"] == 6


def test_a_real_conflict_from_a_stale_resource_version(kube):
    fake, url = kube
    scaler = _scaler(url)
    original = scaler._read

    def stale_once():
        obj = original()
        if not getattr(stale_once, "done", False):
            stale_once.done = True
            obj["metadata"]["resourceVersion"] = "1"  # as if another writer bumped it after our read
        return obj

    scaler._read = stale_once
    assert scaler.scale("ysb", 3, "d-4").startswith("scaled")
    assert [w.body["metadata"]["resourceVersion"] for w in fake.writes()] == ["1", "101"]
    assert [w.code for w in fake.writes()] == [409, 200]


@pytest.mark.parametrize(("code", "message"), [
    (403, 'deployments.apps "flink-taskmanager" is forbidden: User "system:serviceaccount:daedalus:worker" cannot '
          'patch resource "deployments/scale" in API group "apps" in the namespace "streaming"'),
    (422, 'Scale.autoscaling "flink-taskmanager" is invalid: spec.replicas: Invalid value: -1'),
])
def test_refusals_fail_at_once_with_the_api_message_in_the_ledger(kube, code, message):
    fake, url = kube
    fake.faults.append(Fault("PATCH", "/scale", code, message))
    knowledge = Knowledge.new("ysb", LoopConfig())
    decision = Decision(id="d-5", time=1000.0, kind="scale-out", current=4, target=6)
    action = apply(decision, knowledge, _scaler(url), now=1000.0)
    assert action.state == "failed"
    assert action.message == f"Deployment streaming/flink-taskmanager: patch refused: {code} " \
                             f"{'Forbidden' if code == 403 else 'Unprocessable Entity'}: {message}"
    assert knowledge.entry("d-5").state == "failed" and knowledge.entry("d-5").message == action.message
    assert len(fake.writes()) == 1 and fake.objects[DEP]["spec"]["replicas"] == 4


def test_a_missing_target_is_a_failed_action_naming_it(kube):
    fake, url = kube
    del fake.objects[DEP]  # granted by name, but not there
    with pytest.raises(ConnectorError, match=r'Deployment streaming/flink-taskmanager: patch refused: 404 Not Found: '
                                             r'deployments.apps "flink-taskmanager" not found$'):
        _scaler(url).scale("ysb", 2, "d-6")


def test_a_target_the_role_does_not_name_is_forbidden(kube):
    fake, url = kube
    with pytest.raises(ConnectorError, match=r'Deployment streaming/victim: read refused: 403 Forbidden: '
                                             r'deployments.apps "victim" is forbidden: User '
                                             r'"system:serviceaccount:daedalus:daedalus-worker" cannot get resource '
                                             r'"deployments/scale" in API group "apps" in the namespace "streaming"'):
        _scaler(url, name="victim").current("ysb")
    assert fake.writes() == []


def test_5xx_and_timeouts_are_retried_with_backoff(kube):
    fake, url = kube
    sleeps: list[float] = []
    fake.faults += [Fault("GET", DEP + "/scale", 503, "etcdserver: leader changed"),
                    Fault("GET", DEP + "/scale", 500, "internal"), Fault("PATCH", "/scale", 503, "unavailable")]
    assert _scaler(url, sleeps=sleeps).scale("ysb", 6, "d-7").startswith("scaled")
    assert sleeps[:3] == [0.5, 1.0, 0.5]  # backoff doubles within one call, starts again for the next
    fake.faults.append(Fault("GET", DEP + "/scale", 200, delay=1.5))  # answers too late for a 0.3 s timeout
    assert _scaler(url, sleeps=sleeps, request_timeout_s=0.3).current("ysb") == 6
    assert len(fake.applied()) == 1


def test_persistent_5xx_gives_up_after_the_bounded_attempts(kube):
    fake, url = kube
    fake.faults += [Fault("PATCH", "/scale", 503, "unavailable")] * 4
    with pytest.raises(ConnectorError, match=r"patch refused: 503 Service Unavailable: unavailable"):
        _scaler(url).scale("ysb", 6, "d-8")
    assert len(fake.writes()) == 4 and fake.objects[DEP]["spec"]["replicas"] == 4


def test_an_unreachable_api_server_is_a_connector_error():
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    api.configuration.retries = 0
    scaler = KubernetesScaler("Deployment", "streaming", "x", api, sleep=lambda s: None, attempts=2)
    with pytest.raises(ConnectorError, match=r"read failed after 2 attempts: API server unreachable"):
        scaler.current("ysb")


def test_a_flink_deployment_scales_its_taskmanagers_through_the_scale_subresource(kube):
    fake, url = kube
    scaler = _scaler(url, kind="FlinkDeployment", name="ysb")
    assert scaler.current("ysb") == 2  # spec.taskManager.replicas, as the operator's CRD maps it
    assert scaler.scale("ysb", 6, "d-9").startswith("scaled FlinkDeployment streaming/ysb 2 → 6 (decision d-9); "
                                                    "ready after")
    (write,) = fake.writes()
    assert (write.path, write.content_type) == (FLINK + "/scale", MERGE)
    assert write.body == {"metadata": {"resourceVersion": "103"}, "spec": {"replicas": 6}}
    assert fake.objects[FLINK]["spec"] == {"job": {"parallelism": 4}, "taskManager": {"replicas": 6}}
    _only_scale_subresources(fake)


def test_a_spark_application_scales_its_executors_and_waits_for_them(kube):
    fake, url = kube
    fake.ready_after_reads = 3
    sleeps: list[float] = []
    message = _scaler(url, kind="SparkApplication", name="clicks", sleeps=sleeps).scale("clicks", 5, "d-10")
    assert message.startswith("scaled SparkApplication streaming/clicks 2 → 5 (decision d-10); ready after")
    assert sleeps == [0.5, 1.0]  # polled with growing pauses, not busy-waiting
    assert fake.writes()[0].body["spec"] == {"replicas": 5}
    assert fake.objects[SPARK]["spec"] == {"executor": {"instances": 5}}
    _only_scale_subresources(fake)


def test_a_custom_resource_without_a_scale_subresource_says_so(kube):
    fake, url = kube
    del fake.scale_paths["sparkapplications"]  # the upstream spark-operator CRD: subresources: {status: {}}
    with pytest.raises(ConnectorError, match=r"SparkApplication streaming/clicks: read refused: 404 Not Found: the "
                                             r"server could not find the requested resource \(if the "
                                             r"SparkApplication exists, its CustomResourceDefinition declares no "
                                             r"scale subresource"):
        _scaler(url, kind="SparkApplication", name="clicks").current("clicks")


def test_readiness_has_a_timeout(kube):
    fake, url = kube
    fake.ready_after_reads = 1000
    api = client.ApiClient(client.Configuration(host=url))
    scaler = KubernetesScaler("StatefulSet", "streaming", "wordcount", api, ready_timeout_s=1.0)  # real sleeps
    assert scaler.scale("ks", 7, "d-11").endswith("not ready within 1 s (the controller reports 4 of 7 replicas)")
    assert len([r for r in fake.requests if r.method == "GET"]) <= 4  # polled at 0 and 0.5 s, no busy wait


def test_from_spec_reads_the_kubeconfig(kube, tmp_path, monkeypatch):
    fake, url = kube
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
                  "clusters": [{"name": "loopback", "cluster": {"server": url}}],
                  "users": [{"name": "tester", "user": {"token": "t0ken"}}],
                  "contexts": [{"name": "test", "context": {"cluster": "loopback", "user": "tester"}}]}
    (tmp_path / "config").write_text(yaml.safe_dump(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    jobs = parse_jobs({"jobs": [{"name": "ysb", "engine": "flink", "prometheus": {"url": "http://prom:9090"},
                                 "selector": {"namespace": "streaming"}, "source": {"topic": "ad-events"},
                                 "scale_target": {"kind": "Deployment", "namespace": "streaming",
                                                  "name": "flink-taskmanager"}}]})
    assert KubernetesScaler.from_spec(jobs.job("ysb")).current("ysb") == 4
    assert fake.requests[-1].path == DEP + "/scale"


def test_execute_twice_with_lost_knowledge_still_applies_once(kube):
    """The ledger stops a retry in the same knowledge; the value stops one after the knowledge was lost."""
    fake, url = kube
    decision = Decision(id="d-12", time=1000.0, kind="scale-out", current=4, target=6)
    first = Knowledge.new("ysb", LoopConfig())
    assert apply(decision, first, _scaler(url), now=1000.0).state == "executed"
    assert apply(decision, first, _scaler(url), now=1001.0).message == "already applied: not applying twice"
    lost = Knowledge.new("ysb", LoopConfig())
    again = apply(decision, lost, _scaler(url), now=1002.0)
    assert again.state == "executed" and "already at 6: nothing to patch" in again.message
    assert len(fake.applied()) == 1


@pytest.mark.parametrize(("namespace", "name", "field"), [
    ("..", "victim", "namespace"), ("streaming", "../../deployments/victim", "name"), ("Streaming", "x", "namespace"),
    ("streaming", "x" * 254, "name"), ("a" * 64, "x", "namespace"), ("streaming", "tm\n", "name"),
])
def test_names_that_are_not_kubernetes_names_never_reach_a_url(namespace, name, field):
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    with pytest.raises(ConfigurationError, match=rf"^field scale_target\.{field}: .* must be a lowercase RFC 1123 "):
        KubernetesScaler("Deployment", namespace, name, api)


def test_the_rbac_manifest_grants_get_and_patch_of_named_scale_subresources_only():
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert [r["kind"] for r in roles] == ["Role"]
    rules = roles[0]["rules"]
    assert all(r.get("resourceNames") for r in rules), "every rule names its targets"
    assert all(set(r) == {"apiGroups", "resources", "resourceNames", "verbs"} for r in rules)
    granted = {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
    assert granted == {(group, f"{plural}/scale", verb) for group, plural in [
        ("apps", "deployments"), ("apps", "statefulsets"), ("flink.apache.org", "flinkdeployments"),
        ("sparkoperator.k8s.io", "sparkapplications")] for verb in ("get", "patch")}
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": roles[0]["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
