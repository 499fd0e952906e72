"""Recovery time (the paper's recovery model): predicted for each candidate scale-out, observed by anomaly detection."""

from daedalus.models.recovery.anomaly import RecoveryTracker, observed_recovery_time, superseded_note
from daedalus.models.recovery.detector import AnomalyDetector
from daedalus.models.recovery.prediction import DowntimeEstimates, predict_recovery_time, recovery_times

__all__ = ["AnomalyDetector", "DowntimeEstimates", "RecoveryTracker", "observed_recovery_time",
           "predict_recovery_time", "recovery_times", "superseded_note"]
