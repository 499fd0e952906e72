"""A loop run killed between its save and its approval steps (issue 38's CI run: Prefect ended a run 3 s in, after
its concurrency lease was revoked): the next run starts the open proposal's form and closes the form of a proposal
the ledger already closed. A real Prefect API, a registered `approve-scale` deployment (no worker: its runs stay
Scheduled, which is what a busy worker leaves too) and a simulated job in approve mode from a jobs file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.store import Store
from daedalus.flows.mape_k import mape_k
from daedalus.tasks.approval import APPROVE_DEPLOYMENT
from tests.ops.conftest import with_proposal, write_jobs


@pytest.fixture
def approvals(prefect_harness: None) -> None:
    """The `approve-scale` deployment the loop starts its forms from."""
    flow_name, name = APPROVE_DEPLOYMENT.split("/")
    with get_client(sync_client=True) as client:
        client.create_deployment(flow_id=client.create_flow_from_name(flow_name), name=name)


def _forms(proposal: str) -> list:
    with get_client(sync_client=True) as client:
        return client.read_flow_runs(flow_run_filter=FlowRunFilter(
            tags=FlowRunFilterTags(all_=[f"proposal:{proposal}"])))


def test_the_next_run_does_what_a_killed_run_left_undone(approvals, tmp_path: Path) -> None:
    jobs_file = write_jobs(tmp_path / "jobs.yaml", [{"name": "ads", "mode": "approve", "approval_timeout": "10m",
                                                     "sim": {"seed": 1, "speedup": 20}}])
    spec, store_url = load_jobs(jobs_file).job("ads"), str(tmp_path / "store")
    # What the killed run saved: a proposal awaiting an operator, and no approval run for it on the server.
    proposal = with_proposal(spec, store_url, created=time.time()).pending.id
    assert _forms(proposal) == []

    first = mape_k(job="ads", store_url=store_url, jobs_file=str(jobs_file))
    assert first["action"] is None  # the loop holds while the proposal waits: nothing new was proposed
    forms = _forms(proposal)
    assert [(f.name, f.idempotency_key, f.parameters["request"]["proposal"]) for f in forms] == \
        [(f"approve-{proposal}", f"approve-{proposal}", proposal)]
    assert forms[0].parameters["request"]["predicted_recovery_s"] == 120.0  # as the ledger predicted it
    mape_k(job="ads", store_url=store_url, jobs_file=str(jobs_file))
    assert [f.id for f in _forms(proposal)] == [forms[0].id]  # once per proposal, however many runs follow

    # A run that applied a rejection and saved, then died before closing the form: the next run closes it.
    job = Store(store_url).job("ads")
    k = job.load().knowledge
    k.move(k.entry(proposal), "rejected", time.time(), time.time(), "rejected by bob", "bob", "peak ahead")
    k.pending = None
    job.save(k)
    mape_k(job="ads", store_url=store_url, jobs_file=str(jobs_file))
    (form,) = _forms(proposal)
    assert (form.state.type.value, form.state.name) == ("COMPLETED", "Rejected")
    assert form.state.message == f"proposal {proposal} rejected by bob: peak ahead (recorded in the job's ledger)"
