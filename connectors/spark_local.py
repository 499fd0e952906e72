"""Execute on a local Spark Structured Streaming job (scale target kind `spark-local`).

The job (runtime/spark_stream.py) runs in its own process; this scaler talks to it through two small
files in its working folder: it writes `control.json` (wanted parallelism and decision id) and reads
`state.json` (running parallelism, last applied decision). The job rescales by stopping its query and
starting it again from its checkpoint with the new parallelism.

Exactly once: a decision already in `state.json` is not applied again; the control file names its decision,
so the job applies each decision once even if the file is written twice.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daedalus.connectors.polling import poll
from daedalus.models.errors import ConfigurationError, ConnectorError

if TYPE_CHECKING:
    from daedalus.connectors.jobs import JobSpec


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: readers never see half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class SparkLocalScaler:
    """Scaler for a local streaming job started with `python -m daedalus.runtime.spark_stream WORKDIR ...`."""

    def __init__(self, workdir: str | Path, ready_timeout_s: float = 120.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.workdir = Path(workdir)
        self.ready_timeout_s = ready_timeout_s
        self._sleep = sleep

    @classmethod
    def from_spec(cls, spec: JobSpec) -> SparkLocalScaler:
        path = spec.scale_target.path
        if not path:
            raise ConfigurationError(f"job {spec.name!r}: field scale_target.path: a spark-local target needs the "
                                     "job's working folder (where `python -m daedalus.runtime.spark_stream` runs)")
        return cls(path, spec.scale_target.ready_timeout)

    def _state(self) -> dict[str, Any]:
        state = read_json(self.workdir / "state.json")
        if state is None:
            raise ConnectorError(f"spark-local job in {self.workdir}: no readable state.json; is it running? "
                                 f"(python -m daedalus.runtime.spark_stream {self.workdir} ...)")
        return state

    def current(self, job: str) -> int:
        return int(self._state()["parallelism"])

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        state = self._state()
        before, cores = int(state["parallelism"]), int(state["cores"])
        where = f"local Spark query of {job} ({self.workdir})"
        if state.get("decision") == decision_id:
            return f"{where}: decision {decision_id} already applied (parallelism {before}): not applying it twice"
        if not 1 <= target <= cores:
            raise ConnectorError(f"{where}: parallelism {target} is outside 1..{cores} (the job runs on "
                                 f"local[{cores}])")
        if dry_run:
            return f"dry run: would restart the {where} from its checkpoint with parallelism {before} → {target}"
        write_json(self.workdir / "control.json", {"parallelism": target, "decision": decision_id})
        started = time.monotonic()

        def probe() -> tuple[bool, None]:
            state = self._state()
            return state.get("decision") == decision_id and bool(state.get("running")), None

        if poll(probe, self.ready_timeout_s, self._sleep, first=0.2)[0]:
            return (f"restarted the {where} from its checkpoint with parallelism {before} → {target} "
                    f"(decision {decision_id}); running after {time.monotonic() - started:.1f} s")
        return (f"asked the {where} to restart with parallelism {before} → {target} (decision {decision_id}); "
                f"not running again within {self.ready_timeout_s:g} s")
