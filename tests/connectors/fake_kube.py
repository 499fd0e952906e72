"""A loopback HTTP server that speaks the Kubernetes API endpoints the scaler may use: the scale subresources.

There is no Kubernetes API server on these machines, so the executor is tested against this: real HTTP, real
JSON bodies (Scale objects as the API returns them, `Status` objects for errors), JSON merge patches applied as
the API server applies them, resourceVersion preconditions (409), `dryRun=All`, and a scripted list of faults.
Every request is first authorized against the Role of deployments/k8s/rbac.yaml (or the rules given), as the
API server's RBAC authorizer would: anything the Role does not grant is refused with 403, so a test passing
here proves the scaler needs no more than the manifest grants. Every request is recorded (method, path, query,
content type, body, status answered) so tests assert what the client sent.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

RBAC = Path(__file__).resolve().parents[2] / "deployments" / "k8s" / "rbac.yaml"
USER = "system:serviceaccount:daedalus:daedalus-worker"
_PATH = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)/"
                   r"(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?$")
VERBS = {"GET": "get", "PATCH": "patch", "PUT": "update", "POST": "create", "DELETE": "delete"}
REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid",
           500: "InternalError", 503: "ServiceUnavailable"}
# Where each kind's scale subresource reads and writes (a CRD's `subresources.scale`). FlinkDeployment: the Flink
# Kubernetes Operator's CRD. SparkApplication: the upstream CRD declares no scale subresource; this is the one a
# cluster would add for Daedalus (tests remove it to see the upstream CRD's answer).
SCALE_PATHS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "deployments": (("spec", "replicas"), ("status", "replicas")),
    "statefulsets": (("spec", "replicas"), ("status", "replicas")),
    "flinkdeployments": (("spec", "taskManager", "replicas"), ("status", "taskManager", "replicas")),
    "sparkapplications": (("spec", "executor", "instances"), ("status", "executorInstances")),
}


def status(code: int, message: str) -> dict[str, Any]:
    """A Kubernetes `Status` error object."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": REASONS.get(code, "Unknown"), "code": code}


def role(path: Path = RBAC) -> dict[str, Any]:
    """The (one) Role of an RBAC manifest."""
    (found,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "Role"]
    return found


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _set(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = value


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any
    code: int = 0  # the status answered
    written: bool = False  # the API server persisted it (a PATCH, even one whose answer then failed)


@dataclass
class Fault:
    """Answer the next request matching method and path suffix with `code` (and optionally wait first).

    With `applied`, the API server first handles the request as usual (a PATCH is written), and only its answer
    fails: after `delay`, `code` (a 5xx from a proxy, say), or, with `code` 200, the normal answer, late (past the
    client's timeout: the write happened although the client saw a timeout).
    """

    method: str
    suffix: str
    code: int
    message: str = "scripted fault"
    delay: float = 0.0
    applied: bool = False


@dataclass
class FakeKube:
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # by object path
    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    ready_after_reads: int = 1  # a scaled object's status shows the new replicas after this many reads
    role: dict[str, Any] = field(default_factory=role)
    scale_paths: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=lambda: dict(SCALE_PATHS))
    # Called with (request, "received") before a request is answered, and by Server with (request, "answered")
    # once its answer is written: a test's hook can, say, kill the client process at that moment.
    on_request: Callable[[Request, str], None] | None = None
    changes: list[tuple[str, Any, Any]] = field(default_factory=list)  # persisted writes: (object path, before, after)
    _pending_ready: dict[str, int] = field(default_factory=dict)
    _version: int = 100
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, group: str, version: str, plural: str, obj: dict[str, Any]) -> str:
        md = obj["metadata"]
        path = f"/apis/{group}/{version}/namespaces/{md['namespace']}/{plural}/{md['name']}"
        md["resourceVersion"] = str(self._next())
        self.objects[path] = obj
        return path

    def _next(self) -> int:
        self._version += 1
        return self._version

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.method == "PATCH"]

    def applied(self) -> list[Request]:
        """Accepted writes of a scale-out (not dry runs)."""
        return [r for r in self.writes() if r.code == 200 and "dryRun" not in r.query]

    # --- behaviour ------------------------------------------------------------------------------

    def handle(self, method: str, url: str, content_type: str | None, body: Any) -> tuple[int, Any, float]:
        return self.serve(method, url, content_type, body)[1]

    def serve(self, method: str, url: str, content_type: str | None, body: Any
              ) -> tuple[Request, tuple[int, Any, float]]:
        """`handle`, with the recorded request."""
        request = Request(method, urlparse(url).path, parse_qs(urlparse(url).query), content_type, body)
        if self.on_request is not None:
            self.on_request(request, "received")
        with self.lock:
            self.requests.append(request)
            written = len(self.changes)
            answer = self._answer(method, url, body)
            request.code, request.written = answer[0], len(self.changes) > written
            return request, answer

    def _forbidden(self, method: str, path: str) -> str | None:
        """The API server's RBAC refusal for this request, or None when the Role grants it."""
        verb = VERBS.get(method, method.lower())
        m = _PATH.match(path)
        if m is None:
            return f'User "{USER}" cannot {verb} path "{path}"'
        resource = m["plural"] + (f"/{m['sub']}" if m["sub"] else "")
        for rule in self.role["rules"] if m["ns"] == self.role["metadata"]["namespace"] else ():
            if (m["group"] in rule.get("apiGroups", ()) and resource in rule.get("resources", ())
                    and verb in rule.get("verbs", ())
                    and ("resourceNames" not in rule or m["name"] in rule["resourceNames"])):
                return None
        return (f'{m["plural"]}.{m["group"]} "{m["name"]}" is forbidden: User "{USER}" cannot {verb} resource '
                f'"{resource}" in API group "{m["group"]}" in the namespace "{m["ns"]}"')

    def _answer(self, method: str, url: str, body: Any) -> tuple[int, Any, float]:
        parsed = urlparse(url)
        query = parse_qs(parsed.query)
        refusal = self._forbidden(method, parsed.path)
        if refusal is not None:
            return 403, status(403, refusal), 0
        for i, f in enumerate(self.faults):
            if f.method == method and parsed.path.endswith(f.suffix):
                del self.faults[i]
                if f.applied:
                    code, payload, delay = self._respond(method, parsed.path, query, body)
                    if f.code != 200:
                        code, payload = f.code, status(f.code, f.message)
                    return code, payload, delay + f.delay
                return f.code, status(f.code, f.message), f.delay
        return self._respond(method, parsed.path, query, body)

    def _respond(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any, float]:
        """The API server's own answer to an authorized request."""
        parsed = urlparse(path)
        m = _PATH.match(parsed.path)
        assert m is not None  # authorized requests have the shape of the Role's resources
        if m["sub"] != "scale" or m["plural"] not in self.scale_paths:
            return 404, status(404, "the server could not find the requested resource"), 0
        base = parsed.path.removesuffix("/scale")
        obj = self.objects.get(base)
        if obj is None:
            return 404, status(404, f'{m["plural"]}.{m["group"]} "{m["name"]}" not found'), 0
        if method == "GET":
            self._progress(base, obj)
            return 200, self._scale(base, obj), 0
        if method == "PATCH":
            return self._patch(base, obj, body, query.get("dryRun") == ["All"])
        return 405, status(405, f"method {method} not allowed"), 0

    def _paths(self, base: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self.scale_paths[base.split("/")[-2]]

    def _scale(self, base: str, obj: dict[str, Any]) -> dict[str, Any]:
        """The Scale object the API server derives from the object (autoscaling/v1)."""
        spec_path, status_path = self._paths(base)
        md = obj["metadata"]
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": md["name"], "namespace": md["namespace"],
                             "resourceVersion": md["resourceVersion"]},
                "spec": {"replicas": _get(obj, spec_path)},
                "status": {"replicas": _get(obj, status_path) or 0, "selector": f"app={md['name']}"}}

    def _patch(self, base: str, obj: dict[str, Any], body: Any, dry: bool) -> tuple[int, Any, float]:
        if not isinstance(body, dict):
            return 400, status(400, "the body of the request was in an unknown format"), 0
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            kind = base.split("/")[-2]
            return 409, status(409, f'Operation cannot be fulfilled on {kind} "{obj["metadata"]["name"]}": the object '
                                    "has been modified; please apply your changes to the latest version and try "
                                    "again"), 0
        replicas = (body.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            return 422, status(422, f'Scale.autoscaling "{obj["metadata"]["name"]}" is invalid: spec.replicas: '
                                    f"Invalid value: {replicas!r}: must be greater than or equal to 0"), 0
        new = copy.deepcopy(obj)
        _set(new, self._paths(base)[0], replicas)
        if dry:
            return 200, self._scale(base, new), 0
        if new != obj:
            self._pending_ready[base] = self.ready_after_reads
        new["metadata"]["resourceVersion"] = str(self._next())
        self.objects[base] = new
        self.changes.append((base, _get(obj, self._paths(base)[0]), replicas))
        return 200, self._scale(base, new), 0

    def _progress(self, base: str, obj: dict[str, Any]) -> None:
        """Each read brings a scaled object closer to ready; then its status shows the new replicas."""
        if base not in self._pending_ready:
            return
        self._pending_ready[base] -= 1
        if self._pending_ready[base] > 0:
            return
        del self._pending_ready[base]
        spec_path, status_path = self._paths(base)
        _set(obj, status_path, _get(obj, spec_path))
        obj["metadata"]["resourceVersion"] = str(self._next())


class Server:
    """Serves a FakeKube on a free loopback port until closed."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                request, (code, payload, delay) = outer.kube.serve(self.command, self.path,
                                                                   self.headers.get("Content-Type"), body)
                if delay:
                    time.sleep(delay)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return
                if outer.kube.on_request is not None:
                    outer.kube.on_request(request, "answered")

            do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
