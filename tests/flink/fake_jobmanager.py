"""A loopback HTTP server speaking the few JobManager REST endpoints the Flink scalers use, with scripted faults.

It keeps jobs (id, name, state, vertices with parallelism and max parallelism) and their resource requirements;
a PUT of requirements sets the vertices' parallelism to the new upper bound after `apply_after` GETs of the job
(as Flink applies it at the next checkpoint). `faults` is a list of (method, path prefix, status) answered once
each, in order, before the real answer; `lost` the same, answered after the request took effect (an answer lost
on the way back, or a concurrent request for the same change that Flink refuses as a conflict); every request is
recorded.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeJob:
    jid: str
    name: str
    parallelism: int = 1
    max_parallelism: int = 128
    state: str = "RUNNING"
    vertices: tuple[str, ...] = ("cbc357ccb763df2852fee8c4fc7d55f2", "90bea66de1c231edf33913ecd54406c1")
    lower: int = 1
    upper: int = 1
    pending: int | None = None  # a requested parallelism not applied yet
    gets_until_applied: int = 0


@dataclass
class FakeJobManager:
    jobs: list[FakeJob] = field(default_factory=list)
    faults: list[tuple[str, str, int]] = field(default_factory=list)
    lost: list[tuple[str, str, int]] = field(default_factory=list)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    apply_after: int = 1
    taskmanagers: int = 4

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        manager = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                status, answer = manager.handle(method, self.path, body)
                self._answer(status, answer)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_PUT(self) -> None:
                self._handle("PUT")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def puts(self) -> list[tuple[str, Any]]:
        return [(path, body) for method, path, body in self.requests if method == "PUT"]

    def job(self, jid: str) -> FakeJob | None:
        return next((j for j in self.jobs if j.jid == jid), None)

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self.lock:
            self.requests.append((method, path, body))
            for i, (m, prefix, status) in enumerate(self.faults):
                if m == method and path.startswith(prefix):
                    del self.faults[i]
                    return status, {"errors": [f"scripted {status} for {method} {path}"]}
            answer = self._answer(method, path, body)
            for i, (m, prefix, status) in enumerate(self.lost):
                if m == method and path.startswith(prefix):
                    del self.lost[i]
                    return status, {"errors": [f"scripted {status} after {method} {path} took effect"]}
            return answer

    def _answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """The real answer of the endpoints the scalers use (the lock held)."""
        if path == "/overview":
            return 200, {"taskmanagers": self.taskmanagers, "slots-total": self.taskmanagers}
        if path == "/jobs/overview":
            return 200, {"jobs": [{"jid": j.jid, "name": j.name, "state": j.state} for j in self.jobs]}
        parts = path.strip("/").split("/")
        job = self.job(parts[1]) if len(parts) >= 2 and parts[0] == "jobs" else None
        if job is None:
            return 404, {"errors": [f"Job {parts[1] if len(parts) > 1 else '?'} not found"]}
        if len(parts) == 2 and method == "GET":
            if job.pending is not None:
                job.gets_until_applied -= 1
                if job.gets_until_applied < 0:
                    job.parallelism, job.pending = job.pending, None
            return 200, {"jid": job.jid, "name": job.name, "state": job.state, "vertices": [
                {"id": v, "parallelism": job.parallelism, "maxParallelism": job.max_parallelism,
                 "status": "RUNNING" if job.pending is None else "CREATED"} for v in job.vertices]}
        if len(parts) == 3 and parts[2] == "resource-requirements":
            if method == "GET":
                return 200, {v: {"parallelism": {"lowerBound": job.lower, "upperBound": job.upper}}
                             for v in job.vertices}
            uppers = {int(r["parallelism"]["upperBound"]) for r in body.values()}
            job.lower = min(int(r["parallelism"]["lowerBound"]) for r in body.values())
            job.upper = uppers.pop()
            job.pending, job.gets_until_applied = job.upper, self.apply_after
            return 200, {}
        return 404, {"errors": [f"no handler for {method} {path}"]}
