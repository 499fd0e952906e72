"""A loopback HTTP server that speaks the few Kubernetes API endpoints the scaler uses.

There is no Kubernetes API server on these machines, so the executor is tested against this: real HTTP, real
JSON bodies (objects as the API returns them, `Status` objects for errors), JSON merge patches applied as the
API server applies them, resourceVersion preconditions (409), `dryRun=All`, and a scripted list of faults.
Every request is recorded (method, path, query, content type, body) so tests assert what the client sent.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_PATH = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)/"
                   r"(?P<name>[^/]+)(?P<scale>/scale)?$")
REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid",
           500: "InternalError", 503: "ServiceUnavailable"}


def status(code: int, message: str) -> dict[str, Any]:
    """A Kubernetes `Status` error object."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": REASONS.get(code, "Unknown"), "code": code}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any
    code: int = 0  # the status answered


@dataclass
class Fault:
    """Answer the next request matching method and path suffix with `code` (and optionally wait first)."""

    method: str
    suffix: str
    code: int
    message: str = "scripted fault"
    delay: float = 0.0


@dataclass
class FakeKube:
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # by object path
    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    ready_after_reads: int = 1  # a scaled object reports ready after this many reads
    _pending_ready: dict[str, int] = field(default_factory=dict)
    _version: int = 100
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, group: str, version: str, plural: str, obj: dict[str, Any]) -> str:
        md = obj["metadata"]
        path = f"/apis/{group}/{version}/namespaces/{md['namespace']}/{plural}/{md['name']}"
        md.setdefault("generation", 1)
        md["resourceVersion"] = str(self._next())
        self.objects[path] = obj
        return path

    def _next(self) -> int:
        self._version += 1
        return self._version

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.method == "PATCH"]

    # --- behaviour ------------------------------------------------------------------------------

    def applied(self) -> list[Request]:
        """Accepted writes of a scale-out (not dry runs, not annotation-only patches)."""
        return [r for r in self.writes() if r.code == 200 and "dryRun" not in r.query and "spec" in r.body]

    def handle(self, method: str, url: str, content_type: str | None, body: Any) -> tuple[int, Any, float]:
        request = Request(method, urlparse(url).path, parse_qs(urlparse(url).query), content_type, body)
        with self.lock:
            self.requests.append(request)
            answer = self._answer(method, url, body)
            request.code = answer[0]
            return answer

    def _answer(self, method: str, url: str, body: Any) -> tuple[int, Any, float]:
        parsed = urlparse(url)
        query = parse_qs(parsed.query)
        for i, f in enumerate(self.faults):
            if f.method == method and parsed.path.endswith(f.suffix):
                del self.faults[i]
                return f.code, status(f.code, f.message), f.delay
        m = _PATH.match(parsed.path)
        base = parsed.path.removesuffix("/scale")
        obj = self.objects.get(base)
        if m is None or obj is None:
            return 404, status(404, f'{m["plural"] if m else "resource"} "{m["name"] if m else "?"}" not found'), 0
        if method == "GET":
            self._progress(base, obj)
            return 200, self._view(obj, bool(m["scale"])), 0
        if method == "PATCH":
            return self._patch(base, obj, bool(m["scale"]), body, query.get("dryRun") == ["All"])
        return 405, status(405, f"method {method} not allowed"), 0

    def _view(self, obj: dict[str, Any], scale: bool) -> dict[str, Any]:
        if not scale:
            return copy.deepcopy(obj)
        md = obj["metadata"]
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": md["name"], "namespace": md["namespace"],
                             "resourceVersion": md["resourceVersion"]},
                "spec": {"replicas": obj["spec"]["replicas"]},
                "status": {"replicas": obj.get("status", {}).get("replicas", 0), "selector": "app=x"}}

    def _patch(self, base: str, obj: dict[str, Any], scale: bool, body: Any, dry: bool) -> tuple[int, Any, float]:
        if not isinstance(body, dict):
            return 400, status(400, "the body of the request was in an unknown format"), 0
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            kind = base.split("/")[-2]
            return 409, status(409, f'Operation cannot be fulfilled on {kind} "{obj["metadata"]["name"]}": the object '
                                    "has been modified; please apply your changes to the latest version and try "
                                    "again"), 0
        if scale:
            replicas = (body.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                return 422, status(422, f'Scale.autoscaling "{obj["metadata"]["name"]}" is invalid: spec.replicas: '
                                        f"Invalid value: {replicas!r}: must be greater than or equal to 0"), 0
            new = merge_patch(obj, {"spec": {"replicas": replicas}})
        else:
            patch = dict(body)
            patch["metadata"] = {k: v for k, v in (body.get("metadata") or {}).items() if k != "resourceVersion"}
            new = merge_patch(obj, patch)
        if dry:
            return 200, self._view(new, scale), 0
        if new.get("spec") != obj.get("spec"):
            new["metadata"]["generation"] = obj["metadata"]["generation"] + 1
            self._pending_ready[base] = self.ready_after_reads
        new["metadata"]["resourceVersion"] = str(self._next())
        self.objects[base] = new
        return 200, self._view(new, scale), 0

    def _progress(self, base: str, obj: dict[str, Any]) -> None:
        """Each read brings a scaled object closer to ready; then its status shows the new scale-out."""
        if base not in self._pending_ready:
            return
        self._pending_ready[base] -= 1
        if self._pending_ready[base] > 0:
            return
        del self._pending_ready[base]
        spec, st = obj["spec"], obj.setdefault("status", {})
        st["observedGeneration"] = obj["metadata"]["generation"]
        if "replicas" in spec:
            st["replicas"] = st["readyReplicas"] = spec["replicas"]
        elif "executor" in spec:
            st["applicationState"] = {"state": "RUNNING"}
            st["executorState"] = {f"exec-{i}": "RUNNING" for i in range(spec["executor"]["instances"])}
        else:
            st["lifecycleState"], st["jobStatus"] = "STABLE", {"state": "RUNNING"}
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
                code, payload, delay = outer.kube.handle(self.command, self.path, self.headers.get("Content-Type"),
                                                         body)
                if delay:
                    time.sleep(delay)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_PATCH = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
