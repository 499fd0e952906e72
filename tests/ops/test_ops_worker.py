"""Stopping `daedalus worker` (issue 14): on SIGTERM (what systemd and Kubernetes send) and on SIGINT it takes no new
runs, lets the runs in flight finish within a grace period, ends the rest as Cancelled, exits 0 within its stop
timeout and leaves no process behind: not the preloaded process, its forked runs, the Prefect worker or the clients.

A real Prefect server (SQLite, loopback port), two simulated jobs in auto mode deployed from a jobs file, and a
`daedalus worker` signalled alone, as Kubernetes signals PID 1. A recovery monitor whose rescale lies in the future
polls until its timeout: a run in flight for minutes, like the monitors that outlived their worker in the issue.
Three to five minutes on two cores."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from daedalus.runtime.local_prefect import LocalPrefect, start_server
from daedalus.runtime.prefork import STOP_TIMEOUT_ENV, STOP_TIMEOUT_S
from tests.helpers import DAEDALUS
from tests.ops.conftest import write_jobs

pytestmark = pytest.mark.slow

POOL = "ops-worker"
OURS = (b"daedalus.runtime.prefork", b"daedalus.runtime.prefect_worker", b"prefect.engine", b"prefect\0worker")
FINAL = {"COMPLETED", "CANCELLED"}  # the runs a stopped worker leaves besides Scheduled: no Pending/Running/Crashed


def api(server: LocalPrefect, method: str, path: str, **kw: Any) -> Any:
    """A REST call, retried on 503 (SQLite busy) as Prefect's own client does, and on a timeout (a loaded machine)."""
    for attempt in range(6):
        try:
            r = httpx.request(method, f"{server.api_url}{path}", timeout=30, **kw)
        except httpx.TimeoutException:
            if attempt == 5:
                raise
            continue
        if r.status_code not in (429, 503) or attempt == 5:
            break
        time.sleep(1 + attempt)
    r.raise_for_status()
    return r.json() if r.content else None


def pool_runs(server: LocalPrefect) -> list[dict]:
    """The pool's runs that are not (or no longer) Scheduled: the schedules keep an hour of those ahead."""
    return api(server, "POST", "/flow_runs/filter", json={
        "work_pools": {"name": {"any_": [POOL]}}, "flow_runs": {"state": {"type": {"not_any_": ["SCHEDULED"]}}},
        "limit": 200})


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, server: LocalPrefect) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in server.home.glob("*.log"))
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; logs:\n{logs}")


# --- processes, from /proc --------------------------------------------------------------------------------------


def _started(pid: int) -> int | None:
    """The process's start time (clock ticks after boot): a pid together with it names one process, never a reuse."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid: int) -> set[tuple[int, int]]:
    """(pid, start time) of every live process under `pid`."""
    found: set[tuple[int, int]] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            for kid in kids:
                started = _started(kid)
                if started is not None:
                    found.add((kid, started))
                    todo.append(kid)
    return found


def alive(processes: set[tuple[int, int]]) -> list[str]:
    return [_cmdline(pid) for pid, started in processes if _started(pid) == started]


def _cmdline(pid: int) -> str:
    try:
        return f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"{pid}: (gone)"


def processes_of(server: LocalPrefect) -> list[str]:
    """Live runs, preloaded processes, clients and Prefect workers talking to this test's server (other tests on the
    machine run their own)."""
    mine = f"PREFECT_API_URL={server.api_url}\0".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(s in (proc / "cmdline").read_bytes() for s in OURS) and mine in (proc / "environ").read_bytes():
                found.append(_cmdline(int(proc.name)))
        except OSError:
            continue
    return found


# --- the scenario -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalPrefect, Path]]:
    root = tmp_path_factory.mktemp("ops-worker")
    jobs_file = write_jobs(root / "jobs.yaml", [
        {"name": "ads", "sim": {"seed": 1, "speedup": 20}},
        {"name": "clicks", "sim": {"seed": 2, "speedup": 20}},
    ], defaults={"mode": "auto", "scaleout": {"min": 1, "max": 12}})
    server = start_server(root / "prefect")
    try:
        deploy = subprocess.run([DAEDALUS, "deploy", "--jobs-file", str(jobs_file), "--pool", POOL, "--store",
                                 str(root / "store"), "--lake", str(root / "lake")], env=server.env(),
                                capture_output=True, text=True, timeout=300)
        assert deploy.returncode == 0, deploy.stderr + deploy.stdout
        yield server, root
    finally:
        server.stop()


def monitor_run(server: LocalPrefect, root: Path, decision: str, rescale_time: float, timeout_s: float,
                poll_s: float) -> str:
    """A recovery-monitor run of ads, created through its deployment; its id."""
    deployment = next(d for d in api(server, "POST", "/deployments/filter", json={"limit": 50})
                      if d["name"] == "recovery-monitor")
    run = api(server, "POST", f"/deployments/{deployment['id']}/create_flow_run", json={"parameters": {
        "job": "ads", "decision": decision, "rescale_time": rescale_time, "timeout_s": timeout_s, "poll_s": poll_s,
        "store_url": str(root / "store"), "jobs_file": str(root / "jobs.yaml")}})
    return run["id"]


def long_monitor(server: LocalPrefect, root: Path) -> str:
    """A recovery-monitor run that polls for ten minutes: its rescale is in the future, so the job never recovers."""
    return monitor_run(server, root, "stop-test", rescale_time=4e9, timeout_s=600, poll_s=2)


def claimed_but_not_started(server: LocalPrefect, worker_pid: int) -> str:
    """What a stop in the middle of a submission leaves: a run the Prefect worker proposed Pending (and logged as
    submitting, under the name `daedalus worker` gives it) but never started a process for."""
    deployment = next(d for d in api(server, "POST", "/deployments/filter", json={"limit": 50})
                      if d["name"] == "fleet-overview")
    run = api(server, "POST", f"/deployments/{deployment['id']}/create_flow_run", json={"state": {
        "type": "SCHEDULED", "state_details": {"scheduled_time": "2100-01-01T00:00:00Z"}}})
    api(server, "POST", f"/flow_runs/{run['id']}/set_state", json={"state": {"type": "PENDING"}, "force": True})
    api(server, "POST", "/logs/", json=[{
        "name": "prefect.flow_runs.worker", "level": 20, "flow_run_id": run["id"],
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "message": f"Worker 'daedalus-{socket.gethostname()}-{worker_pid}' submitting flow run '{run['id']}'"}])
    return run["id"]


def stop_with_a_run_in_flight(deployed: tuple[LocalPrefect, Path], signum: int, stop_timeout_s: float,
                              name: str) -> dict[str, Any]:
    """Start a worker, let loops complete, start a long run, signal the worker alone and time its exit."""
    server, root = deployed
    worker = server.start_worker(POOL, prefork=True, name=name, env={
        "PREFECT_WORKER_QUERY_SECONDS": "2", STOP_TIMEOUT_ENV: str(stop_timeout_s)})
    seen: set[tuple[int, int]] = set()
    started = time.time()

    def loops_completed() -> bool:
        seen.update(descendants(worker.pid))
        return any(r["state"]["type"] == "COMPLETED" and r["parameters"].get("job") == "ads"
                   and r["end_time"] and _epoch(r["end_time"]) > started for r in pool_runs(server))

    wait_for("a completed loop run of ads", loops_completed, 240, server)  # on failure server.stop() stops it
    monitor = long_monitor(server, root)

    def monitor_running() -> bool:
        seen.update(descendants(worker.pid))
        return api(server, "GET", f"/flow_runs/{monitor}")["state"]["type"] == "RUNNING"

    wait_for("the recovery monitor to run", monitor_running, 120, server)
    claimed = claimed_but_not_started(server, worker.pid)
    time.sleep(2)
    seen.update(descendants(worker.pid))
    t0 = time.monotonic()
    worker.send_signal(signum)
    code = worker.wait(stop_timeout_s + 30)
    took = time.monotonic() - t0
    time.sleep(1)  # anything orphaned has had time to be reparented and show itself
    return {"code": code, "took": took, "seen": seen, "monitor": monitor, "claimed": claimed,
            "log": server.home / f"{name}.log"}


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def assert_stopped_cleanly(deployed: tuple[LocalPrefect, Path], result: dict[str, Any], bound_s: float) -> None:
    server, _ = deployed
    log = result["log"].read_text(errors="replace")[-4000:]
    assert result["code"] == 0, f"exit code {result['code']}; worker log:\n{log}"
    assert result["took"] <= bound_s, f"stopped in {result['took']:.1f} s, bound {bound_s} s; worker log:\n{log}"
    assert len(result["seen"]) >= 4  # preloaded process, Prefect worker, a client and its forked run at least
    assert not alive(result["seen"]), f"processes of the worker outlived it: {alive(result['seen'])}"
    assert not processes_of(server), f"processes of the worker outlived it: {processes_of(server)}"
    runs = pool_runs(server)
    left = [(r["name"], r["state"]["type"], r["state"]["message"]) for r in runs if r["state"]["type"] not in FINAL]
    assert not left, f"runs left behind: {left}; worker log:\n{log}"
    for run in ("monitor", "claimed"):
        state = api(server, "GET", f"/flow_runs/{result[run]}")["state"]
        assert state["type"] == "CANCELLED", (run, state)


def test_sigterm_lets_runs_finish_within_the_grace_then_cancels_the_rest(deployed) -> None:
    result = stop_with_a_run_in_flight(deployed, signal.SIGTERM, STOP_TIMEOUT_S, "worker-sigterm")
    assert_stopped_cleanly(deployed, result, STOP_TIMEOUT_S + 3)
    assert result["took"] >= STOP_TIMEOUT_S / 2  # the monitor had its grace period before it was cancelled


def test_sigint_with_a_short_stop_timeout_cancels_runs_at_once(deployed) -> None:
    result = stop_with_a_run_in_flight(deployed, signal.SIGINT, 10.0, "worker-sigint")
    assert_stopped_cleanly(deployed, result, 10.0 + 3)


# --- settings a forked run inherits (runtime/inherited_settings.py) ------------------------------------------------


def run_logs(server: LocalPrefect, run_id: str) -> list[dict]:
    return api(server, "POST", "/logs/filter", json={"logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200})


def test_forked_runs_log_at_the_levels_their_own_deployments_set(deployed) -> None:
    """The loops' runs inherit the settings the preloaded process built from their environment, built once, in
    which their task runs log warnings only (LOOP_ENV); a recovery monitor, whose deployment sets no level, builds
    its own and logs its task runs' ends, as a fresh `python -m prefect.engine` would."""
    server, root = deployed
    name = "worker-levels"
    worker = server.start_worker(POOL, prefork=True, name=name, env={"PREFECT_WORKER_QUERY_SECONDS": "2"})
    started = time.time()

    deployments = {d["name"]: d["id"] for d in api(server, "POST", "/deployments/filter", json={"limit": 50})}
    loop_ids = {deployments["ads"], deployments["clicks"]}

    def loops_completed() -> list[dict]:
        done = [r for r in pool_runs(server) if r["deployment_id"] in loop_ids and r["state"]["type"] == "COMPLETED"
                and r["end_time"] and _epoch(r["end_time"]) > started]
        return done if len(done) >= 4 else []  # two minutes of both jobs' loops

    loops = wait_for("four completed loop runs", loops_completed, 300, server)
    quick = monitor_run(server, root, "levels-test", rescale_time=time.time(), timeout_s=1, poll_s=1)
    wait_for("the recovery monitor to finish", lambda: api(server, "GET", f"/flow_runs/{quick}")["state"]["type"]
             in {"COMPLETED", "FAILED", "CRASHED"}, 120, server)
    worker.send_signal(signal.SIGTERM)
    worker.wait(STOP_TIMEOUT_S + 30)

    def task_ends(run_id: str) -> list[dict]:
        return [g for g in run_logs(server, run_id)
                if g["name"] == "prefect.task_runs" and g["message"].startswith("Finished in state")]

    for loop in loops:
        assert any(g["name"] == "prefect.flow_runs" for g in run_logs(server, loop["id"])), loop["name"]
        assert task_ends(loop["id"]) == [], loop["name"]
    assert api(server, "GET", f"/flow_runs/{quick}")["state"]["type"] == "COMPLETED"
    assert len(task_ends(quick)) >= 2  # follow-recovery and publish-recovery at least
    log = (server.home / f"{name}.log").read_text(errors="replace")
    assert "built the Prefect settings of the runs forked most" in log, log[-4000:]
