"""Knowledge round-trips through bytes; the store writes atomically and falls back on corruption."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from daedalus.connectors.store import Store
from daedalus.models.config import LoopConfig
from daedalus.models.errors import ConfigurationError, KnowledgeError
from daedalus.models.knowledge import Knowledge, Proposal
from daedalus.models.loop.messages import apply_messages
from daedalus.models.types import LedgerEntry
from tests.helpers import T0, observation


def learned() -> Knowledge:
    k = Knowledge.new("j", LoopConfig())
    rng = np.random.default_rng(1)
    for n in range(5):
        obs = observation(start=T0 + 60 * n, cpu=0.4)
        cpu = {w: np.clip(0.3 + 0.4 * rng.random(60), 0, 1) for w in obs.cpu}
        thr = {w: 1_000 * cpu[w] for w in obs.cpu}
        k.capacity.update(type(obs)(**{**obs.__dict__, "cpu": cpu, "throughput": thr}))
        k.forecaster.observe(obs.timestamps, obs.workload)
    k.anomaly.update_many([1.0, -1.0, 2.0])
    k.downtime.learn(True, 40.0)
    k.last_rescale = k.last_action = T0 + 10
    k.pending = Proposal("j-1", T0, T0 + 600, 2, 3, ("why",))
    k.record(LedgerEntry("j-1", T0, 2, 3, "scale-out", ("why",), "proposed", 45.0, history=[(T0, "proposed")]))
    return k


def test_round_trip_is_exact():
    k = learned()
    again = Knowledge.from_bytes(k.to_bytes())
    assert again.to_bytes() == k.to_bytes()
    assert again.capacity.capacities(12, 2) == k.capacity.capacities(12, 2)
    assert again.forecaster.forecast(T0 + 300).values == k.forecaster.forecast(T0 + 300).values
    assert again.ledger[0].history == [(T0, "proposed")]
    assert json.loads(k.to_bytes())["schema_version"] == 1


def test_a_ledger_entry_is_stored_field_by_field_as_plain_json():
    stored = json.loads(learned().to_bytes())["ledger"]
    assert stored == [{"id": "j-1", "time": T0, "current": 2, "target": 3, "kind": "scale-out", "reasons": ["why"],
                       "state": "proposed", "predicted_recovery_s": 45.0, "observed_recovery_s": None, "message": "",
                       "history": [[T0, "proposed"]], "wall": None, "operator": None, "events": [], "verdict": None,
                       "capacity_ratio": None, "held_until": None, "hold_ended": None}]


@pytest.mark.parametrize("blob", [b"", b"{not json", b'{"schema_version": 99}', b'{"schema_version": 1}'])
def test_unreadable_knowledge_raises_knowledge_error(blob):
    with pytest.raises(KnowledgeError):
        Knowledge.from_bytes(blob)


def test_store_versions_prune_and_fall_back(tmp_path):
    store = Store(str(tmp_path / "k"), keep=3)
    k = learned()
    for n in range(5):
        k.loops = n
        assert store.job(k.job).save(k) == n + 1
    assert store.job("j").versions() == [3, 4, 5]
    newest = store.job("j").path(5)
    data = Path(newest).read_bytes()
    Path(newest).write_bytes(data[: len(data) // 2])  # half-written
    loaded = store.job("j").load()
    assert loaded.version == 4 and loaded.knowledge.loops == 3
    assert "truncated" in loaded.warnings[0]
    Path(store.job("j").path(4)).write_bytes(data.replace(b'"loops":4', b'"loops":7'))  # bit rot
    loaded = store.job("j").load()
    assert loaded.version == 3 and "checksum mismatch" in loaded.warnings[1]
    assert not [p for p in (tmp_path / "k" / "j").iterdir() if p.name.startswith(".tmp")]


def test_store_rejects_unsafe_job_names(tmp_path):
    with pytest.raises(ConfigurationError, match="not allowed"):
        Store(str(tmp_path)).job("../etc").versions()


def test_inbox_messages_are_applied_once_and_refused_outside_limits(tmp_path):
    inbox = Store(str(tmp_path)).job("j")
    k = learned()
    cfg = LoopConfig(max_scaleout=4)
    inbox.post("approve", {"proposal": "j-1", "scaleout": 9, "operator": "ana"}, now=T0 + 1)
    applied = apply_messages(k, [m for _, m in inbox.pending()], cfg, current=2, now=T0 + 2)
    assert applied.decision is None and "outside the job's limits [1, 4]" in applied.notes[0]
    assert k.pending is not None
    inbox.ack([p for p, _ in inbox.pending()])
    inbox.post("approve", {"proposal": "j-1", "scaleout": 4, "operator": "ana"}, now=T0 + 3)
    applied = apply_messages(k, [m for _, m in inbox.pending()], cfg, current=2, now=T0 + 4)
    assert (applied.decision.current, applied.decision.target, k.pending) == (2, 4, None)
    assert k.entry("j-1").state == "approved"
    again = apply_messages(k, [m for _, m in inbox.pending()], cfg, current=2, now=T0 + 5)
    assert again.decision is None and "no such pending proposal" in again.notes[0]


def test_expired_approval_is_refused():
    k = learned()
    from daedalus.models.loop.messages import ControlMessage

    msg = ControlMessage("m", "j", "approve", T0 + 700, {"proposal": "j-1"})
    applied = apply_messages(k, [msg], LoopConfig(), current=2, now=T0 + 700)
    assert applied.decision is None and "expired" in applied.notes[0]
