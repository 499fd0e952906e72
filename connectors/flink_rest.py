"""Execute on a Flink job through its JobManager: scale targets `flink-rest` and `flink-reactive`.

`flink-rest` rescales a job under the adaptive scheduler in place, as the Flink Kubernetes Operator's standalone
autoscaler does: `PUT /jobs/:jobid/resource-requirements` with the new upper bound of every vertex's parallelism.
Flink 2.x applies it at the next completed checkpoint (the job restarts from that checkpoint at the new
parallelism). The job is found by its name (`scale_target.name`) at every call, so a job resubmitted under a new id
is found again; when no running job has that name, the scaler fails naming the job and what does run.

`flink-reactive` scales a job in Flink's reactive mode, whose parallelism follows the TaskManagers: on this machine
the TaskManagers are processes of the local cluster (`daedalus.runtime.flink.LocalFlink`), started and stopped by its
supervisor on request (`control.json` → `state.json` in the cluster's folder, `scale_target.path`). On Kubernetes
the same mode is scaled through the TaskManager Deployment (kind `Deployment`).

Exactly once, on top of the loop's write-ahead ledger: before acting, the scaler reads what the job already asks
for (its resource requirements; the supervisor's last applied decision) and does nothing when the target is already
requested, so a decision replayed after a crash, or a request that timed out but was applied, is not applied again.
Errors: a 4xx (409 included, after one re-read) fails at once with Flink's own message; a 5xx, a timeout or a
refused connection is retried with backoff (0.5 s doubling, 4 attempts), then fails naming the JobManager. Either
way the action is recorded as failed in the ledger and nothing was requested twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests
from tenacity import (
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    wait_exponential,
)

from daedalus.connectors.fields import redact
from daedalus.connectors.polling import poll
from daedalus.connectors.spark_local import read_json, write_json
from daedalus.models.errors import ConfigurationError, ConnectorError

if TYPE_CHECKING:
    from daedalus.connectors.jobs import JobSpec

TERMINAL = ("FINISHED", "CANCELED", "FAILED")  # a job in these states is gone: another id may carry its name now
RETRY_STATUS = (500, 502, 503, 504)


class FlinkRest:
    """The few JobManager REST calls the scalers need, with bounded retries and errors that name the JobManager."""

    def __init__(self, url: str, timeout_s: float = 10.0, attempts: int = 4, backoff_s: float = 0.5,
                 sleep: Callable[[float], None] = time.sleep, session: requests.Session | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"the JobManager's REST address must be an http(s) URL, got {url!r}")
        self.url = url.rstrip("/")
        self.shown = redact(self.url)
        self.timeout_s, self.attempts, self.backoff_s = timeout_s, attempts, backoff_s
        self._sleep = sleep
        self._session = session or requests.Session()

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(status, JSON body) of one request; retried on 5xx, timeouts and refused connections."""
        # The policy: `attempts` in all on a refused connection, a timeout or a 5xx, backing off from `backoff_s`
        # (doubling); the last answer, or the last error, is what the caller gets.
        policy = Retrying(retry=retry_if_exception_type(requests.RequestException)
                          | retry_if_result(lambda r: r.status_code in RETRY_STATUS),
                          stop=stop_after_attempt(self.attempts), wait=wait_exponential(multiplier=self.backoff_s),
                          sleep=self._sleep, retry_error_callback=lambda rs: rs.outcome.result())  # type: ignore[union-attr]
        try:
            r = policy(self._session.request, method, self.url + path, json=body, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise ConnectorError(f"Flink JobManager {self.shown} unreachable or timing out after {self.attempts} "
                                 f"attempts ({type(exc).__name__}) on {method} {path}") from None
        if r.status_code in RETRY_STATUS:
            raise ConnectorError(f"Flink JobManager {self.shown} answered HTTP {r.status_code} to {method} {path} "
                                 f"{self.attempts} times: {_errors(r)}")
        try:
            return r.status_code, (r.json() if r.content else {})
        except ValueError:
            return r.status_code, {"errors": [r.text[:300]]}

    def get(self, path: str) -> Any:
        status, data = self.call("GET", path)
        if status >= 400:
            raise ConnectorError(f"Flink JobManager {self.shown}: GET {path}: HTTP {status}: {_message(data)}")
        return data

    def job_id(self, name: str) -> str:
        """The id of the one live job called `name` (looked up every time: a resubmitted job has a new id)."""
        jobs = self.get("/jobs/overview").get("jobs", [])
        live = [j for j in jobs if j.get("name") == name and j.get("state") not in TERMINAL]
        if len(live) == 1:
            return str(live[0]["jid"])
        if live:
            raise ConnectorError(f"Flink JobManager {self.shown}: {len(live)} live jobs are called {name!r} "
                                 f"({', '.join(j['jid'] for j in live)}): not guessing which one to scale")
        seen = ", ".join(f"{j.get('name')} ({j.get('state')})" for j in jobs) or "none"
        raise ConnectorError(f"Flink JobManager {self.shown}: no running job called {name!r} (jobs: {seen}); "
                             "holding until it runs again")

    def parallelism(self, job_id: str) -> tuple[int, bool]:
        """The job's parallelism (its largest vertex) and whether every vertex runs."""
        job = self.get(f"/jobs/{job_id}")
        vertices = job.get("vertices", [])
        if not vertices:
            raise ConnectorError(f"Flink JobManager {self.shown}: job {job_id} has no vertices ({job.get('state')})")
        running = job.get("state") == "RUNNING" and all(v.get("status") == "RUNNING" for v in vertices)
        return max(int(v["parallelism"]) for v in vertices), running

    def max_parallelisms(self, job_id: str) -> dict[str, int]:
        """Each vertex's maximum parallelism, by vertex id (a non-parallel operator's is 1)."""
        vertices = self.get(f"/jobs/{job_id}").get("vertices", [])
        return {str(v["id"]): int(v.get("maxParallelism", 1 << 15)) for v in vertices if "id" in v}


def _message(data: Any) -> str:
    if isinstance(data, dict) and data.get("errors"):
        return "; ".join(str(e).strip().splitlines()[0] if str(e).strip() else "" for e in data["errors"])[:500]
    return str(data)[:500]


def _errors(r: requests.Response) -> str:
    try:
        return _message(r.json())
    except ValueError:
        return r.text[:300]


class FlinkRestScaler:
    """Scaler for a Flink job under the adaptive scheduler: its vertices' resource requirements (kind `flink-rest`)."""

    def __init__(self, url: str, job_name: str, ready_timeout_s: float = 120.0,
                 sleep: Callable[[float], None] = time.sleep, rest: FlinkRest | None = None) -> None:
        self.rest = rest or FlinkRest(url, sleep=sleep)
        self.job_name, self.ready_timeout_s = job_name, ready_timeout_s
        self._sleep = sleep

    @classmethod
    def from_spec(cls, spec: JobSpec) -> FlinkRestScaler:
        url = spec.scale_target.path
        if not url or not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"job {spec.name!r}: field scale_target.path: a flink-rest target needs the "
                                     "JobManager's REST address, e.g. http://flink-jobmanager:8081")
        return cls(url, spec.scale_target.name, spec.scale_target.ready_timeout)

    def current(self, job: str) -> int:
        return self.rest.parallelism(self.rest.job_id(self.job_name))[0]

    def _requirements(self, job_id: str) -> dict[str, Any]:
        return dict(self.rest.get(f"/jobs/{job_id}/resource-requirements"))

    @staticmethod
    def _asks(requirements: dict[str, Any]) -> dict[str, int]:
        return {vertex: int(r["parallelism"]["upperBound"]) for vertex, r in requirements.items()}

    @staticmethod
    def _wanted(requirements: dict[str, Any], limits: dict[str, int], target: int) -> dict[str, int]:
        """The upper bound each vertex gets for `target`: a vertex with a lower maximum (a non-parallel operator)
        stays at its maximum, as Flink itself requires."""
        return {vertex: min(target, limits.get(vertex, target)) for vertex in requirements}

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        job_id = self.rest.job_id(self.job_name)
        where = f"Flink job {self.job_name} ({job_id}) on {self.rest.shown}"
        requirements = self._requirements(job_id)
        before, running = self.rest.parallelism(job_id)
        limits = self.rest.max_parallelisms(job_id)
        wanted = self._wanted(requirements, limits, target)
        if self._asks(requirements) == wanted:
            state = "running at it" if running and before == target else f"running at {before} for now"
            return (f"{where} already asks for parallelism {target} ({state}): nothing to request "
                    f"(decision {decision_id})")
        limit = max(limits.values(), default=1 << 15)  # the job's: its most parallel vertex's
        if not 1 <= target <= limit:
            raise ConnectorError(f"{where}: parallelism {target} is outside 1..{limit} (the job's max parallelism)")
        if dry_run:
            return f"dry run: would set the resource requirements of {where} to parallelism {before} → {target}"
        body = {vertex: {"parallelism": {"lowerBound": min(int(r["parallelism"]["lowerBound"]), wanted[vertex]),
                                         "upperBound": wanted[vertex]}} for vertex, r in requirements.items()}
        started = time.monotonic()
        status, data = self.rest.call("PUT", f"/jobs/{job_id}/resource-requirements", body)
        if status == 409 and self._asks(self._requirements(job_id)) == wanted:
            status = 200  # a concurrent request set the same: it is asked for, once
        if status >= 400:
            raise ConnectorError(f"{where}: PUT resource-requirements (parallelism {before} → {target}) refused with "
                                 f"HTTP {status}: {_message(data)}")
        def probe() -> tuple[bool, ConnectorError | None]:
            try:
                now, running = self.rest.parallelism(self.rest.job_id(self.job_name))
            except ConnectorError as exc:  # restarting: the job may briefly not answer
                return False, exc
            return running and now == target, None

        ok, with_error = poll(probe, self.ready_timeout_s, self._sleep)
        if ok:
            return (f"set the resource requirements of {where} to parallelism {before} → {target} (decision "
                    f"{decision_id}); running at {target} after {time.monotonic() - started:.1f} s")
        return (f"set the resource requirements of {where} to parallelism {before} → {target} (decision "
                f"{decision_id}); not running at {target} within {self.ready_timeout_s:g} s"
                + (f" (last: {with_error})" if with_error else ""))


class FlinkReactiveScaler:
    """Scaler for a local Flink job in reactive mode: the number of TaskManager processes (kind `flink-reactive`)."""

    def __init__(self, workdir: str | Path, job_name: str, ready_timeout_s: float = 180.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.workdir, self.job_name = Path(workdir), job_name
        self.ready_timeout_s = ready_timeout_s
        self._sleep = sleep

    @classmethod
    def from_spec(cls, spec: JobSpec) -> FlinkReactiveScaler:
        path = spec.scale_target.path
        if not path:
            raise ConfigurationError(f"job {spec.name!r}: field scale_target.path: a flink-reactive target needs the "
                                     "local cluster's folder (daedalus.runtime.flink.LocalFlink's workdir)")
        return cls(path, spec.scale_target.name, spec.scale_target.ready_timeout)

    def _state(self) -> dict[str, Any]:
        state = read_json(self.workdir / "state.json")
        if state is None or not state.get("running"):
            raise ConnectorError(f"local Flink cluster in {self.workdir}: not running (no live state.json)")
        return state

    def _rest(self, state: dict[str, Any]) -> FlinkRest:
        return FlinkRest(str(state["rest"]), sleep=self._sleep)

    def current(self, job: str) -> int:
        overview = self._rest(self._state()).get("/overview")
        return int(overview["taskmanagers"])

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        state = self._state()
        rest = self._rest(state)
        where = f"reactive Flink job {self.job_name} in {self.workdir}"
        before = int(rest.get("/overview")["taskmanagers"])
        if state.get("decision") == decision_id:
            return f"{where}: decision {decision_id} already applied ({before} TaskManagers): not applying it twice"
        most = int(state.get("max", target))
        if not 1 <= target <= most:
            raise ConnectorError(f"{where}: {target} TaskManagers is outside 1..{most} (the cluster's maximum)")
        if before == target:
            return f"{where} already has {target} TaskManagers: nothing to start or stop (decision {decision_id})"
        if dry_run:
            return f"dry run: would change the TaskManagers of the {where}: {before} → {target}"
        write_json(self.workdir / "control.json", {"taskmanagers": target, "decision": decision_id})
        started = time.monotonic()

        def probe() -> tuple[bool, None]:
            state = read_json(self.workdir / "state.json") or {}
            if state.get("decision") != decision_id:
                return False, None
            if state.get("error"):
                raise ConnectorError(f"{where}: the cluster refused {before} → {target}: {state['error']}")
            try:
                parallelism, running = rest.parallelism(rest.job_id(self.job_name))
            except ConnectorError:
                return False, None
            return running and parallelism == target, None

        if poll(probe, self.ready_timeout_s, self._sleep)[0]:
            return (f"{where}: {before} → {target} TaskManagers (decision {decision_id}); the job runs at "
                    f"parallelism {target} after {time.monotonic() - started:.1f} s")
        return (f"{where}: asked for {before} → {target} TaskManagers (decision {decision_id}); the job did not run "
                f"at {target} within {self.ready_timeout_s:g} s")
