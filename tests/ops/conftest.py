"""Fixtures of the ops tests: jobs files of simulated jobs, knowledge with a pending proposal, and a stand-in
Prefect API that has no approval runs (for the commands' own checks; the real server is tested in test_ops_prefect)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from daedalus.connectors.jobs import JobSpec, load_jobs
from daedalus.connectors.store import Store
from daedalus.models.knowledge import Knowledge, Proposal
from daedalus.models.types import LedgerEntry

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def write_jobs(path: Path, jobs: list[dict], defaults: dict | None = None) -> Path:
    base = {"engine": "sim", "scale_target": {"kind": "sim", "name": "sim"}, "scaleout": {"min": 2, "max": 10}}
    path.write_text(yaml.safe_dump({"defaults": {**base, **(defaults or {})}, "jobs": jobs}, sort_keys=False))
    return path


@pytest.fixture
def jobs_file(tmp_path: Path) -> Path:
    """Two simulated jobs: one automatic, one waiting for approvals, with a blackout window."""
    return write_jobs(tmp_path / "jobs.yaml", [
        {"name": "wordcount"},
        {"name": "ads", "mode": "approve", "approval_timeout": "10m",
         "blackout": [{"start": "09:00", "end": "17:00"}]},
    ])


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return str(tmp_path / "store")


def with_proposal(spec: JobSpec, store_url: str, current: int = 4, target: int = 6, created: float = T0,
                  ttl: float = 600.0) -> Knowledge:
    """Stored knowledge of `spec` with a pending proposal `<job>-<created>`, as the loop records it."""
    k = Knowledge.new(spec.name, spec.loop_config())
    pid = f"{spec.name}-{int(created)}"
    k.record(LedgerEntry(id=pid, time=created, current=current, target=target, kind="scale-out",
                         reasons=("C_4 below the forecast peak",), state="proposed", predicted_recovery_s=120.0,
                         history=[(created, "proposed")], events=[(created, "proposed")]))
    k.pending = Proposal(pid, created, created + ttl, current, target, ("C_4 below the forecast peak",))
    Store(store_url).job(k.job).save(k)
    return k


@pytest.fixture
def ads(jobs_file: Path) -> JobSpec:
    return load_jobs(jobs_file).job("ads")


class _PrefectAPI(BaseHTTPRequestHandler):
    """Just enough of a Prefect API for the commands' client: healthy, version 3, no deployments, no flow runs."""

    def do_GET(self) -> None:
        self._answer({"/api/health": True, "/api/admin/version": "3.8.8"}.get(self.path))

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self._answer([] if self.path in ("/api/flow_runs/filter", "/api/deployments/filter") else None)

    def _answer(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(404 if body is None else 200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def prefect_api_url() -> Iterator[str]:
    """The URL of a reachable Prefect API that has no approval runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PrefectAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/api"
    finally:
        server.shutdown()
        thread.join(5)
