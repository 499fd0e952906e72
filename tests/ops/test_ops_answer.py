"""An operator's answer is never lost (issue 36), on a real Prefect server (SQLite, loopback) and a real process
worker: `daedalus approve` seconds before the proposal's deadline while the worker takes no run (stopped with
SIGSTOP, as a worker busy behind a Spark run), then the worker comes back after the deadline and the loop's late run
applies the answer. The ledger dates it when it was given, with who and why. About three minutes on two cores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from daedalus.connectors.store import Store
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.messages import ANSWER_GRACE_S
from daedalus.runtime.local_prefect import LocalPrefect, start_server
from tests.helpers import DAEDALUS
from tests.ops.conftest import write_jobs
from tests.ops.test_ops_prefect import wait_for

pytestmark = pytest.mark.slow

POOL = "answer-test"
JOB = "payments"


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalPrefect, Path, str]]:
    root = tmp_path_factory.mktemp("ops-answer")
    jobs_file = write_jobs(root / "jobs.yaml", [{"name": JOB, "sim": {"seed": 1, "speedup": 10}}], defaults={
        "mode": "approve", "approval_timeout": "1m", "scaleout": {"min": 1, "max": 12},
        "planner": "daedalus-paper"})  # its first loop proposes 12 → 11 (test_ops_approval)
    store = str(root / "store")
    server = start_server(root / "prefect")
    try:
        deploy = subprocess.run([DAEDALUS, "deploy", str(jobs_file), "--pool", POOL, "--store", store, "--no-lake",
                                 "--no-background"], env=server.env(), capture_output=True, text=True, timeout=300)
        assert deploy.returncode == 0, deploy.stderr + deploy.stdout
        yield server, jobs_file, store
    finally:
        server.stop()


def _knowledge(store: str) -> Knowledge | None:
    return Store(store).job(JOB).load().knowledge


# Started this long before the deadline: the command dates the answer when it starts, after its imports (0.8 s on
# the slower of this project's machines); one second left no margin on a loaded one.
BEFORE_S = 5.0


def test_an_answer_given_seconds_before_the_deadline_is_applied_by_a_run_that_starts_after_it(deployed):
    server, _, store = deployed
    worker = server.start_worker(POOL, prefork=False, env={"PREFECT_WORKER_QUERY_SECONDS": "2"})
    pending = wait_for("a proposal", lambda: (k := _knowledge(store)) is not None and k.pending, 300, server)
    os.kill(worker.pid, signal.SIGSTOP)  # busy: it starts no run until it is continued
    try:
        time.sleep(max(0.0, pending.expires - BEFORE_S - time.time()))
        answer = subprocess.run([DAEDALUS, "approve", pending.id, "--scaleout", "10", "--operator", "oncall",
                                 "--reason", "peak at noon"], env=server.env(), capture_output=True, text=True,
                                timeout=60)
        assert answer.returncode == 0, answer.stderr + answer.stdout
        assert "recorded in the inbox of payments" in " ".join(answer.stderr.split())
        given = datetime.fromisoformat(json.loads(answer.stdout.strip().splitlines()[-1])["given"]).timestamp()
        assert pending.expires - BEFORE_S - 1 <= given < pending.expires
        # Past the deadline and the loop's grace: the next loop run starts late, whatever the worker did.
        time.sleep(max(0.0, pending.expires + ANSWER_GRACE_S + 5 - time.time()))
        assert _knowledge(store).entry(pending.id).state == "proposed"  # nothing ran meanwhile
    finally:
        os.kill(worker.pid, signal.SIGCONT)

    def applied():
        entry = _knowledge(store).entry(pending.id)
        return entry if entry.state in ("executed", "failed") else None

    entry = wait_for("the late loop run to apply the answer", applied, 240, server)
    assert (entry.state, entry.target, entry.operator) == ("executed", 10, "oncall")
    (when, label), = [(t, what) for t, what in entry.events if what.startswith("approved")]
    assert label == "approved by oncall: peak at noon" and abs(when - given) < 1  # when it was given
    executed = next(t for t, what in entry.events if what == "executed")
    assert executed > pending.expires + ANSWER_GRACE_S  # applied by a run that started after the deadline
    # The proposal's approval run, still waiting for the UI's form, was closed with the answer.
    runs = httpx.post(f"{server.api_url}/flow_runs/filter", timeout=30,
                      json={"flow_runs": {"tags": {"all_": [f"proposal:{pending.id}"]}}}).json()
    assert [(r["state"]["type"], r["state"]["name"]) for r in runs] == [("COMPLETED", "Approved")]
    assert "by oncall: peak at noon" in runs[0]["state"]["message"]  # closed by the loop or by the run itself
