"""Each benchmark run's result kept on disk, so a re-run reuses the runs whose code and inputs did not change.

A kept run is reused only under the same key: the source of the simulator, of the policy and of what it imports, the
trace itself, and the run's settings. The baselines and the oracle import little of models/, so a benchmark re-run
after a planner change simulates only the two Daedalus policies; those run the whole loop, so their key adds every
module of models/ and every loop setting, and they are reused only while none of it changed (a long benchmark cut
short keeps what it finished).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from daedalus.models.config import LoopConfig

REUSABLE = ("static", "hpa-80", "hpa-85", "ds2", "flink-autoscaler", "oracle")
LOOP_POLICIES = ("daedalus", "daedalus-paper")  # reused only while models/ and the loop settings are unchanged
ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("sim/*.py", "bench/policies.py", "bench/runs.py", "models/types.py", "models/ports.py",
           "models/forecast/steps.py", "models/planning/oracle.py", "models/policies/*.py")


def key(policy: str, workload: str, seed: int, values: np.ndarray, max_scaleout: int, peak_utilization: float,
        loop_overrides: Mapping[str, float] | None) -> str | None:
    """The key a kept run must have to be reused; None for a policy that is never reused."""
    loop = policy in LOOP_POLICIES
    if policy not in REUSABLE and not loop:
        return None
    digest = hashlib.sha256()
    for pattern in (*SOURCES, "models/**/*.py") if loop else SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            if loop or path.name != "daedalus.py":  # the Daedalus policy runs the planner: the baselines do not
                digest.update(path.read_bytes())
    digest.update(np.ascontiguousarray(values, dtype=float).tobytes())
    cfg = LoopConfig(max_scaleout=max_scaleout, **(loop_overrides or {}))
    settings = asdict(cfg) if loop else [cfg.loop_interval_s, cfg.latency_slo, cfg.checkpoint_interval]
    digest.update(json.dumps([policy, workload, seed, max_scaleout, peak_utilization, settings]).encode())
    return digest.hexdigest()


def _path(folder: Path, policy: str, workload: str, seed: int) -> Path:
    return folder / f"{policy}__{workload}__{seed}.json"


def load(folder: Path, policy: str, workload: str, seed: int, wanted: str | None) -> dict[str, Any] | None:
    """The kept result of this run if its key is `wanted`."""
    path = _path(folder, policy, workload, seed)
    if wanted is None or not path.is_file():
        return None
    kept = json.loads(path.read_text())
    return kept["result"] if kept.get("key") == wanted else None


def store(folder: Path, result: dict[str, Any], wanted: str | None) -> None:
    if wanted is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = _path(folder, result["policy"], result["workload"], result["seed"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": wanted, "result": result}))
    tmp.replace(path)
