"""Execute through the Kubernetes API: change a job's scale-out through the target's `scale` subresource only.

Targets: `Deployment` and `StatefulSet` (Flink reactive-mode TaskManagers, Kafka Streams instances), a Flink
Kubernetes Operator `FlinkDeployment` (its CRD maps the scale subresource to `spec.taskManager.replicas`; with
the reactive scheduler the job's parallelism follows), a Spark operator `SparkApplication` (needs a CRD that
declares a scale subresource, e.g. on `spec.executor.instances`: the upstream CRD has none).

Only `get` and `patch` of `<kind>/scale` are used, so the worker's RBAC grants nothing that could rewrite a pod
template (deployments/k8s/rbac.yaml). Exactly once is the loop's write-ahead intent, kept in its own store; the
scaler is idempotent on the value: a target already at the wanted scale-out is not patched again. Every patch
carries the resourceVersion it read: a 409 conflict re-reads and retries. 403/404/422 (and other 4xx) fail at
once with the API's own message; 5xx, timeouts and connection errors retry with exponential backoff. `dry_run`
sends the same patch with the server-side `dryRun=All`.
After a patch, the scaler polls the scale subresource with growing pauses (0.5 s doubling to 5 s, no busy
wait) until its `status.replicas` reaches the new scale-out or `ready_timeout` passes. That is all the Scale
object says: the controller runs that many replicas (for Deployments and StatefulSets: pods created, not
necessarily Ready). Whether they work is the monitor's to see, in the workers' metrics.
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
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from daedalus.connectors.fields import label_problem, subdomain_problem
from daedalus.connectors.polling import poll
from daedalus.models.errors import ConfigurationError, ConnectorError

if TYPE_CHECKING:
    from daedalus.connectors.jobs import JobSpec

MERGE_PATCH = "application/merge-patch+json"


def _transient(exc: BaseException) -> bool:
    """Worth another try: a 5xx, an answer with no status, a timeout or a refused connection."""
    if isinstance(exc, ApiException):
        return exc.status is None or exc.status >= 500
    return isinstance(exc, urllib3.exceptions.HTTPError)


def _conflict(exc: BaseException) -> bool:
    """Someone else wrote between our read and our patch: read again and retry."""
    return isinstance(exc, ApiException) and exc.status == 409


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the API."""

    group: str
    version: str
    plural: str

    @property
    def builtin(self) -> bool:
        return self.group == "apps"


KINDS = {
    "Deployment": Kind("apps", "v1", "deployments"),
    "StatefulSet": Kind("apps", "v1", "statefulsets"),
    "FlinkDeployment": Kind("flink.apache.org", "v1beta1", "flinkdeployments"),
    "SparkApplication": Kind("sparkoperator.k8s.io", "v1beta2", "sparkapplications"),
}


def api_message(exc: ApiException) -> str:
    """The API's own explanation: the `message` of its Status object, else the raw body."""
    try:
        status = json.loads(exc.body or "")
        return str(status.get("message") or exc.body)
    except (ValueError, AttributeError):
        return str(exc.body or exc.reason)


class KubernetesScaler:
    """Scaler for Kubernetes targets through the official client, on their scale subresource."""

    def __init__(self, kind: str, namespace: str, name: str, api: client.ApiClient, ready_timeout_s: float = 120.0,
                 attempts: int = 4, backoff_s: float = 0.5, request_timeout_s: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if kind not in KINDS:
            raise ConfigurationError(f"field scale_target.kind: no Kubernetes kind {kind!r}; known: "
                                     f"{', '.join(sorted(KINDS))}")
        for field, problem in (("namespace", label_problem(namespace)), ("name", subdomain_problem(name))):
            if problem is not None:  # they become URL path segments
                raise ConfigurationError(f"field scale_target.{field}: {problem}")
        self.kind, self.namespace, self.name = kind, namespace, name
        self._kind = KINDS[kind]
        self.ready_timeout_s, self.attempts, self.backoff_s = ready_timeout_s, attempts, backoff_s
        self.request_timeout_s = request_timeout_s
        self._sleep = sleep
        # The two retry policies: a request's (transient failures, with backoff) and a patch's (409 conflicts,
        # re-read at once). Anything else is raised as it is.
        self._requests = Retrying(retry=retry_if_exception(_transient), stop=stop_after_attempt(attempts),
                                  wait=wait_exponential(multiplier=backoff_s, max=10.0), sleep=sleep, reraise=True)
        self._conflicts = Retrying(retry=retry_if_exception(_conflict), stop=stop_after_attempt(attempts),
                                   reraise=True)
        self._apps = client.AppsV1Api(api)
        self._custom = client.CustomObjectsApi(api)

    @classmethod
    def from_spec(cls, spec: JobSpec, api: client.ApiClient | None = None) -> KubernetesScaler:
        """From a jobs-file entry: in-cluster configuration inside a pod, else the kubeconfig."""
        t = spec.scale_target
        if t.kind not in KINDS:
            raise ConfigurationError(f"job {spec.name!r}: field scale_target.kind: {t.kind!r} is not a Kubernetes "
                                     f"kind; known: {', '.join(sorted(KINDS))}")
        return cls(t.kind, t.namespace, t.name, api or _api_client(spec.name), t.ready_timeout)

    @property
    def target(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    # --- HTTP with retries ------------------------------------------------------------------------

    def _retrying(self, what: str, call: Callable[[], Any]) -> Any:
        """`call` under the request policy; an API server still unreachable after the last attempt is a
        ConnectorError, an ApiException is raised as it is."""
        try:
            return self._requests(call)
        except urllib3.exceptions.HTTPError as exc:
            raise ConnectorError(f"{self.target}: {what} failed after {self.attempts} attempts: API server "
                                 f"unreachable or timing out ({type(exc).__name__}: {exc})") from exc

    def _read(self) -> dict[str, Any]:
        """The target's Scale object as the API returns it (raw JSON: no client-side model validation)."""
        k, opts = self._kind, {"_request_timeout": self.request_timeout_s, "_preload_content": False}
        if k.builtin:
            reader = (self._apps.read_namespaced_deployment_scale if self.kind == "Deployment"
                      else self._apps.read_namespaced_stateful_set_scale)
            response = self._retrying("read", lambda: reader(self.name, self.namespace, **opts))
        else:
            response = self._retrying("read", lambda: self._custom.get_namespaced_custom_object_scale(
                k.group, k.version, self.namespace, k.plural, self.name, **opts))
        return json.loads(response.data)

    def _patch(self, body: dict[str, Any], dry_run: bool) -> None:
        k = self._kind
        opts = {"dry_run": "All" if dry_run else None, "_request_timeout": self.request_timeout_s,
                "_content_type": MERGE_PATCH, "_preload_content": False}
        if k.builtin:
            fn = (self._apps.patch_namespaced_deployment_scale if self.kind == "Deployment"
                  else self._apps.patch_namespaced_stateful_set_scale)
            self._retrying("patch", lambda: fn(self.name, self.namespace, body, **opts))
        else:
            self._retrying("patch", lambda: self._custom.patch_namespaced_custom_object_scale(
                k.group, k.version, self.namespace, k.plural, self.name, body, **opts))

    def _failed(self, exc: ApiException, what: str) -> ConnectorError:
        hint = ""
        if exc.status == 404 and not self._kind.builtin:
            hint = (f" (if the {self.kind} exists, its CustomResourceDefinition declares no scale subresource: "
                    "Daedalus scales only through `subresources.scale`)")
        return ConnectorError(f"{self.target}: {what} refused: {exc.status} {exc.reason}: {api_message(exc)}{hint}")

    # --- the Scaler protocol ------------------------------------------------------------------

    def current(self, job: str) -> int:
        try:
            scale = self._read()
        except ApiException as exc:
            raise self._failed(exc, "read") from exc
        return self._replicas(scale)

    def _replicas(self, scale: dict[str, Any]) -> int:
        value = (scale.get("spec") or {}).get("replicas")
        if not isinstance(value, int):
            raise ConnectorError(f"{self.target}: its scale subresource has no spec.replicas (found {value!r})")
        return value

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        """Apply (or, with dry_run, have the API server validate) the new scale-out; returns a ledger message."""
        try:
            return self._conflicts(self._scale_once, target, decision_id, dry_run)
        except ApiException as exc:
            if _conflict(exc):
                raise ConnectorError(f"{self.target}: {self.attempts} conflicts in a row (409): the object keeps "
                                     "changing; not scaled") from exc
            raise self._failed(exc, "dry-run patch" if dry_run else "patch") from exc

    def _scale_once(self, target: int, decision_id: str, dry_run: bool) -> str:
        """Read, and patch with the resourceVersion read (a 409 if it changed since)."""
        scale = self._read()
        before = self._replicas(scale)
        if before == target:
            return f"{self.target} already at {target}: nothing to patch (decision {decision_id})"
        version = (scale.get("metadata") or {}).get("resourceVersion")
        self._patch({"metadata": {"resourceVersion": version}, "spec": {"replicas": target}}, dry_run)
        if dry_run:
            return f"dry run accepted by the API server: would scale {self.target} {before} → {target}"
        return f"scaled {self.target} {before} → {target} (decision {decision_id}); {self._wait_ready(target)}"

    # --- readiness ----------------------------------------------------------------------------

    def _wait_ready(self, target: int) -> str:
        """Until the Scale object's status shows `target` replicas (see the module docstring for what that says)."""
        started = time.monotonic()

        def probe() -> tuple[bool, str]:
            try:
                replicas = (self._read().get("status") or {}).get("replicas") or 0
            except (ApiException, ConnectorError) as exc:
                return False, f"status unreadable ({exc})"
            return replicas == target, f"the controller reports {replicas} of {target} replicas"

        ok, how = poll(probe, self.ready_timeout_s, self._sleep, first=0.5, most=5.0)
        if ok:
            return f"ready after {time.monotonic() - started:.1f} s"
        return f"not ready within {self.ready_timeout_s:g} s ({how})"


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
