"""The K of MAPE-K: one typed state per job, serialised to bytes with a schema version.

Everything is stored as plain data (JSON), never as pickles: a stored version can be read by any later
release that knows its schema version, and inspected by hand.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from daedalus.models.capacity import CapacityModel
from daedalus.models.capacity.verification import Bottleneck, Ceiling, PendingVerification
from daedalus.models.config import LoopConfig
from daedalus.models.errors import KnowledgeError
from daedalus.models.forecast import Forecaster
from daedalus.models.recovery import AnomalyDetector, DowntimeEstimates, RecoveryTracker
from daedalus.models.types import ActionState, LedgerEntry

SCHEMA_VERSION = 1
LEDGER_LIMIT = 1000  # keep the newest entries; older ones remain in earlier stored versions


@dataclass
class Proposal:
    """A scale action waiting for an operator (approve mode)."""

    id: str
    created: float  # the job's clock
    expires: float  # the wall clock: approval timeouts are durations people live by
    current: int
    target: int
    reasons: tuple[str, ...]


@dataclass
class Override:
    """An operator's manual scale, which the loop keeps for `LoopConfig.manual_hold`: until then it takes no
    action of its own (it still plans and reports), then it plans again from the scale-out the operator set."""

    decision_id: str
    scaleout: int
    operator: str
    until: float  # the wall clock, as approval timeouts: a duration people live by, whatever a simulation's speed


@dataclass
class RecoveryWatch:
    """A rescale being followed until the job has recovered."""

    decision_id: str
    rescale_time: float
    scaled_out: bool
    predicted_recovery_s: float | None
    tracker: RecoveryTracker
    restart_time: float | None = None


@dataclass
class Knowledge:
    """Per-job knowledge shared by the four phases."""

    job: str
    capacity: CapacityModel
    forecaster: Forecaster
    anomaly: AnomalyDetector
    downtime: DowntimeEstimates
    last_rescale: float | None = None
    last_action: float | None = None
    last_observation_end: float | None = None
    pending: Proposal | None = None
    watch: RecoveryWatch | None = None
    ledger: list[LedgerEntry] = field(default_factory=list)
    paused: bool = False
    quarantine: str | None = None
    loops: int = 0
    override: Override | None = None  # an operator's manual scale the loop keeps for now
    # Rescale verification (models/loop/verify.py): the executed rescale awaiting its verdict, the ceiling an
    # ineffective scale-out left, the stage last seen limiting the job. Absent from versions stored before it: None.
    verification: PendingVerification | None = None
    ceiling: Ceiling | None = None
    bottleneck: Bottleneck | None = None

    @classmethod
    def new(cls, job: str, cfg: LoopConfig) -> Knowledge:
        return cls(
            job=job,
            capacity=CapacityModel(warmup_s=cfg.warmup_s),
            forecaster=Forecaster(max_d=cfg.forecast_max_d, min_fit_steps=40),  # first fit after 20 min
            anomaly=AnomalyDetector(),
            downtime=DowntimeEstimates(out_s=cfg.downtime_out_s, in_s=cfg.downtime_in_s),
        )

    # The knowledge is the only writer of its ledger: the phases record entries, note and move them through these.

    def record(self, entry: LedgerEntry) -> None:
        self.ledger.append(entry)
        del self.ledger[:-LEDGER_LIMIT]

    def note(self, entry: LedgerEntry, at: float, text: str) -> None:
        """Add a line to an entry's history, at `at` on the job's clock."""
        entry.history.append((at, text))

    def move(self, entry: LedgerEntry, state: ActionState, wall: float, at: float, text: str,
             by: str | None = None, why: str = "") -> None:
        """Move an entry to `state`: an event at the wall-clock time `wall` (done by the operator `by`, None: by the
        loop, for the reason `why`), and `text` in its history at `at`."""
        entry.mark(state, wall, by, why)
        self.note(entry, at, text)

    def intend(self, entry: LedgerEntry, at: float, text: str) -> None:
        """The write-ahead intent before a scaler is called: the entry is `executing` (no event of its own: what the
        call did is the event) and its history says what is about to be done."""
        entry.state = "executing"
        self.note(entry, at, text)

    def entry(self, entry_id: str) -> LedgerEntry | None:
        return next((e for e in reversed(self.ledger) if e.id == entry_id), None)

    def settle_recovery(self, decision_id: str, observed_s: float, downtime_s: float | None, at: float) -> None:
        """A rescale's observed recovery: set once in the ledger, whichever of the loop and the recovery-monitor
        flow notices it first, the downtime estimates learned from it; the rescale is no longer followed."""
        entry = self.entry(decision_id)
        if entry is not None and entry.observed_recovery_s is None:
            entry.observed_recovery_s = float(observed_s)
            self.note(entry, at, f"recovered in {entry.observed_recovery_s:.0f} s")
            self.downtime.learn_recovery(entry.target > entry.current, downtime_s, entry.observed_recovery_s,
                                         entry.predicted_recovery_s)
        if self.watch is not None and self.watch.decision_id == decision_id:
            self.watch = None

    def to_bytes(self) -> bytes:
        state: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "job": self.job,
            "capacity": self.capacity.to_state(),
            "forecaster": self.forecaster.to_state(),
            "anomaly": self.anomaly.to_state(),
            "downtime": self.downtime.to_state(),
            "last_rescale": self.last_rescale,
            "last_action": self.last_action,
            "last_observation_end": self.last_observation_end,
            "pending": None if self.pending is None else asdict(self.pending),
            "watch": None if self.watch is None else {
                **{k: v for k, v in _shallow(self.watch).items() if k != "tracker"},
                "tracker": self.watch.tracker.to_state(),
            },
            "ledger": [_shallow(e) for e in self.ledger],
            "paused": self.paused,
            "quarantine": self.quarantine,
            "loops": self.loops,
            "override": None if self.override is None else asdict(self.override),
            "verification": None if self.verification is None else asdict(self.verification),
            "ceiling": None if self.ceiling is None else asdict(self.ceiling),
            "bottleneck": None if self.bottleneck is None else asdict(self.bottleneck),
        }
        return json.dumps(state, separators=(",", ":"), allow_nan=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Knowledge:
        try:
            s = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KnowledgeError(f"knowledge is not valid JSON: {exc}") from exc
        version = s.get("schema_version") if isinstance(s, dict) else None
        if version != SCHEMA_VERSION:
            raise KnowledgeError(f"knowledge schema version {version!r} is not {SCHEMA_VERSION}")
        try:
            watch = s["watch"]
            return cls(
                job=s["job"],
                capacity=CapacityModel.from_state(s["capacity"]),
                forecaster=Forecaster.from_state(s["forecaster"]),
                anomaly=AnomalyDetector.from_state(s["anomaly"]),
                downtime=DowntimeEstimates.from_state(s["downtime"]),
                last_rescale=s["last_rescale"],
                last_action=s["last_action"],
                last_observation_end=s["last_observation_end"],
                pending=None if s["pending"] is None else Proposal(
                    **{**s["pending"], "reasons": tuple(s["pending"]["reasons"])}
                ),
                watch=None if watch is None else RecoveryWatch(
                    **{**watch, "tracker": RecoveryTracker.from_state(watch["tracker"])}
                ),
                ledger=[
                    LedgerEntry(**{**e, "reasons": tuple(e["reasons"]),
                                   "history": [tuple(h) for h in e["history"]],
                                   "events": [tuple(v) for v in e.get("events", ())]})
                    for e in s["ledger"]
                ],
                paused=bool(s["paused"]),
                quarantine=s["quarantine"],
                loops=int(s["loops"]),
                override=None if s.get("override") is None else Override(**s["override"]),
                verification=_optional(PendingVerification, s.get("verification")),
                ceiling=_optional(Ceiling, s.get("ceiling")),
                bottleneck=_optional(Bottleneck, s.get("bottleneck")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise KnowledgeError(f"knowledge of schema {SCHEMA_VERSION} is incomplete: {exc!r}") from exc


def _shallow(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as they are: the JSON `asdict` would give, without its deep copy of every value, paid on
    every save for each of up to LEDGER_LIMIT entries."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _optional(cls: type[Any], state: dict[str, Any] | None) -> Any:
    """A dataclass stored as a dict, or None (versions stored before it existed have no key)."""
    return None if state is None else cls(**state)
