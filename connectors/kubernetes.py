"""Execute through the Kubernetes API: change a job's scale-out, exactly once per decision.

Targets: `Deployment` and `StatefulSet` through their `scale` subresource (Flink reactive-mode TaskManagers,
Kafka Streams instances); a Flink Kubernetes Operator `FlinkDeployment` (TaskManager replicas or the job's
parallelism, per job); a Spark operator `SparkApplication` (executor instances).

Exactly once: the decision id is written as the annotation `daedalus.io/decision` on the target object, and
an execute that finds its decision already there does nothing. Custom resources get the new scale-out and
the annotation in one merge patch; for Deployments and StatefulSets the scale subresource is patched first
and the annotation after (a retry after a crash in between patches the same replicas again: harmless).
Every write carries the resourceVersion it read: a 409 conflict re-reads and retries. 403/404/422 (and
other 4xx) fail at once with the API's own message; 5xx, timeouts and connection errors retry with
exponential backoff. `dry_run` sends the same patches with the server-side `dryRun=All`.
After a patch, the scaler polls the object with growing pauses (0.5 s doubling to 5 s, no busy wait) until
the new scale-out is ready or `ready_timeout` passes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from daedalus.models.errors import ConfigurationError, ConnectorError

if TYPE_CHECKING:
    from daedalus.connectors.jobs import JobSpec

ANNOTATION = "daedalus.io/decision"
SCALE_OUT_ANNOTATION = "daedalus.io/scale-out"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the API and which field holds its scale-out."""

    group: str
    version: str
    plural: str
    field: tuple[str, ...]  # path of the scale-out in the object

    @property
    def builtin(self) -> bool:
        return self.group == "apps"


KINDS = {
    "Deployment": Kind("apps", "v1", "deployments", ("spec", "replicas")),
    "StatefulSet": Kind("apps", "v1", "statefulsets", ("spec", "replicas")),
    "FlinkDeployment": Kind("flink.apache.org", "v1beta1", "flinkdeployments", ("spec", "job", "parallelism")),
    "SparkApplication": Kind("sparkoperator.k8s.io", "v1beta2", "sparkapplications",
                             ("spec", "executor", "instances")),
}
FLINK_FIELDS = {"job.parallelism": ("spec", "job", "parallelism"),
                "taskmanager.replicas": ("spec", "taskManager", "replicas")}


def _get(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _nest(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out: Any = value
    for key in reversed(path):
        out = {key: out}
    return out


def api_message(exc: ApiException) -> str:
    """The API's own explanation: the `message` of its Status object, else the raw body."""
    try:
        status = json.loads(exc.body or "")
        return str(status.get("message") or exc.body)
    except (ValueError, AttributeError):
        return str(exc.body or exc.reason)


class KubernetesScaler:
    """Scaler for Kubernetes targets through the official client."""

    def __init__(self, kind: str, namespace: str, name: str, api: client.ApiClient,
                 flink_field: str = "job.parallelism", ready_timeout_s: float = 120.0, attempts: int = 4,
                 backoff_s: float = 0.5, request_timeout_s: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if kind not in KINDS:
            raise ConfigurationError(f"field scale_target.kind: no Kubernetes kind {kind!r}; known: "
                                     f"{', '.join(sorted(KINDS))}")
        self.kind, self.namespace, self.name = kind, namespace, name
        k = KINDS[kind]
        self._kind = Kind(k.group, k.version, k.plural, FLINK_FIELDS[flink_field]) if kind == "FlinkDeployment" else k
        self.ready_timeout_s, self.attempts, self.backoff_s = ready_timeout_s, attempts, backoff_s
        self.request_timeout_s = request_timeout_s
        self._sleep = sleep
        self._api = api
        self._apps = client.AppsV1Api(api)
        self._custom = client.CustomObjectsApi(api)

    @classmethod
    def from_spec(cls, spec: JobSpec, api: client.ApiClient | None = None) -> KubernetesScaler:
        """From a jobs-file entry: in-cluster configuration inside a pod, else the kubeconfig."""
        t = spec.scale_target
        if t.kind not in KINDS:
            raise ConfigurationError(f"job {spec.name!r}: field scale_target.kind: {t.kind!r} is not a Kubernetes "
                                     f"kind; known: {', '.join(sorted(KINDS))}")
        return cls(t.kind, t.namespace, t.name, api or _api_client(spec.name), t.flink_field, t.ready_timeout)

    @property
    def target(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    # --- HTTP with retries ------------------------------------------------------------------------

    def _retrying(self, what: str, call: Callable[[], Any]) -> Any:
        """Retry 5xx, timeouts and connection errors with backoff; anything else is raised as it is."""
        delay, attempt = self.backoff_s, 1
        while True:
            try:
                return call()
            except ApiException as exc:
                if exc.status is None or exc.status < 500 or attempt >= self.attempts:
                    raise
            except urllib3.exceptions.HTTPError as exc:
                if attempt >= self.attempts:
                    raise ConnectorError(f"{self.target}: {what} failed after {attempt} attempts: "
                                         f"API server unreachable or timing out ({type(exc).__name__}: {exc})") from exc
            self._sleep(delay)
            delay, attempt = min(2 * delay, 10.0), attempt + 1

    def _read(self) -> dict[str, Any]:
        """The target object as the API returns it (raw JSON: no client-side model validation)."""
        k, opts = self._kind, {"_request_timeout": self.request_timeout_s, "_preload_content": False}
        if k.builtin:
            reader = (self._apps.read_namespaced_deployment if self.kind == "Deployment"
                      else self._apps.read_namespaced_stateful_set)
            response = self._retrying("read", lambda: reader(self.name, self.namespace, **opts))
        else:
            response = self._retrying("read", lambda: self._custom.get_namespaced_custom_object(
                k.group, k.version, self.namespace, k.plural, self.name, **opts))
        return json.loads(response.data)

    def _patch(self, body: dict[str, Any], dry_run: bool, scale: bool = False) -> None:
        k = self._kind
        opts = {"dry_run": "All" if dry_run else None, "_request_timeout": self.request_timeout_s,
                "_content_type": MERGE_PATCH, "_preload_content": False}
        if k.builtin:
            apps, dep = self._apps, self.kind == "Deployment"
            if scale:
                fn = apps.patch_namespaced_deployment_scale if dep else apps.patch_namespaced_stateful_set_scale
            else:
                fn = apps.patch_namespaced_deployment if dep else apps.patch_namespaced_stateful_set
            self._retrying("patch", lambda: fn(self.name, self.namespace, body, **opts))
        else:
            self._retrying("patch", lambda: self._custom.patch_namespaced_custom_object(
                k.group, k.version, self.namespace, k.plural, self.name, body, **opts))

    def _failed(self, exc: ApiException, what: str) -> ConnectorError:
        return ConnectorError(f"{self.target}: {what} refused: {exc.status} {exc.reason}: {api_message(exc)}")

    # --- the Scaler protocol ------------------------------------------------------------------

    def current(self, job: str) -> int:
        try:
            obj = self._read()
        except ApiException as exc:
            raise self._failed(exc, "read") from exc
        value = _get(obj, self._kind.field)
        if not isinstance(value, int):
            raise ConnectorError(f"{self.target}: no scale-out at {'.'.join(self._kind.field)} (found {value!r})")
        return value

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        """Apply (or, with dry_run, have the API server validate) the new scale-out; returns a ledger message."""
        for _ in range(self.attempts):
            try:
                obj = self._read()
                annotations = _get(obj, ("metadata", "annotations")) or {}
                before = _get(obj, self._kind.field)
                if annotations.get(ANNOTATION) == decision_id:
                    return (f"{self.target}: decision {decision_id} already applied "
                            f"(scale-out {before}): not applying it twice")
                self._apply(obj, target, decision_id, dry_run)
            except ApiException as exc:
                if exc.status == 409:
                    continue  # someone else wrote in between: read again and retry
                raise self._failed(exc, "dry-run patch" if dry_run else "patch") from exc
            if dry_run:
                return f"dry run accepted by the API server: would scale {self.target} {before} → {target}"
            return f"scaled {self.target} {before} → {target} (decision {decision_id}); {self._wait_ready(target)}"
        raise ConnectorError(f"{self.target}: {self.attempts} conflicts in a row (409): the object keeps changing; "
                             "not scaled")

    def _apply(self, obj: dict[str, Any], target: int, decision_id: str, dry_run: bool) -> None:
        version = _get(obj, ("metadata", "resourceVersion"))
        notes = {ANNOTATION: decision_id, SCALE_OUT_ANNOTATION: str(target)}
        if self._kind.builtin:
            self._patch({"metadata": {"resourceVersion": version}, "spec": {"replicas": target}}, dry_run, scale=True)
            self._patch({"metadata": {"annotations": notes}}, dry_run)
        else:
            body = _nest(self._kind.field, target)
            body["metadata"] = {"resourceVersion": version, "annotations": notes}
            self._patch(body, dry_run)

    # --- readiness ----------------------------------------------------------------------------

    def _ready(self, obj: dict[str, Any], target: int) -> tuple[bool, str]:
        status = obj.get("status") or {}
        generation = _get(obj, ("metadata", "generation"))
        observed = status.get("observedGeneration")
        caught_up = observed is None or generation is None or observed >= generation
        if self._kind.builtin:
            ready = status.get("readyReplicas") or 0
            return caught_up and ready == target, f"{ready} of {target} replicas ready"
        if self.kind == "FlinkDeployment":
            life, state = status.get("lifecycleState"), _get(status, ("jobStatus", "state"))
            return caught_up and life == "STABLE" and state == "RUNNING", f"lifecycle {life}, job {state}"
        executors = status.get("executorState") or {}
        running = sum(1 for s in executors.values() if s == "RUNNING")
        app = _get(status, ("applicationState", "state"))
        return app == "RUNNING" and running == target, f"application {app}, {running} of {target} executors running"

    def _wait_ready(self, target: int) -> str:
        started = time.monotonic()
        pause = 0.5
        while True:
            try:
                ok, how = self._ready(self._read(), target)
            except (ApiException, ConnectorError) as exc:
                ok, how = False, f"status unreadable ({exc})"
            waited = time.monotonic() - started
            if ok:
                return f"ready after {waited:.1f} s"
            if waited + pause > self.ready_timeout_s:
                return f"not ready within {self.ready_timeout_s:g} s ({how})"
            self._sleep(pause)
            pause = min(2 * pause, 5.0)


def _api_client(job: str) -> client.ApiClient:
    """In-cluster configuration inside a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        try:
            path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
            config.load_kube_config(config_file=path, client_configuration=configuration)
        except (config.ConfigException, OSError, TypeError) as exc:
            raise ConfigurationError(
                f"job {job!r}: field scale_target: no Kubernetes configuration: not in a pod and no usable "
                f"kubeconfig ({exc}); set KUBECONFIG or run the worker in the cluster") from exc
    return client.ApiClient(configuration)
