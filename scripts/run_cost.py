"""What one `mape-k` flow run leaves on a Prefect server: rows per run in the server's tables (task runs, states,
events, logs, artifacts) and the run's own CPU, over N runs of one simulated job called in this process against a
local SQLite server (no worker, no process start: those are `daedalus bench fleet`'s `workers` and `runs`).

    python scripts/run_cost.py DIR [N]
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import sys
import time
from pathlib import Path

import yaml

from daedalus.runtime.local_prefect import start_server

TABLES = ("flow_run", "flow_run_state", "task_run", "task_run_state", "log", "artifact", "events", "event_resources")


def _counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as con:
        return {t: con.execute(f"select count(*) from {t}").fetchone()[0] for t in TABLES}


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(root: Path, runs: int) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    server = start_server(root / "prefect")
    try:
        os.environ.update(server.env())
        jobs = root / "jobs.yaml"
        defaults = {"engine": "sim", "scale_target": {"kind": "sim", "name": "sim"}, "scaleout": {"min": 2, "max": 10}}
        job = {"name": "wc", "sim": {"seed": 1, "speedup": 20}}
        jobs.write_text(yaml.safe_dump({"defaults": defaults, "jobs": [job]}))
        from daedalus.flows.mape_k import mape_k

        db = next((root / "prefect").rglob("*.db"))
        cpu, before = [], {}
        for i in range(runs + 2):  # the first two fit the job's models: not counted
            start = _cpu_s()
            mape_k(job="wc", store_url=str(root / "store"), jobs_file=str(jobs))
            cpu.append(round(_cpu_s() - start, 3))
            if i == 1:
                time.sleep(8)  # the services write the first runs' last batches
                before = _counts(db)
            time.sleep(3)
        time.sleep(10)
        after = _counts(db)
        with sqlite3.connect(db) as con:
            kinds = dict(con.execute("select event, count(*) from events group by event order by 2 desc").fetchall())
        return {"runs": runs, "rows_per_run": {t: round((after[t] - before[t]) / runs, 1) for t in TABLES},
                "run_cpu_s": cpu[2:], "events_by_kind": kinds}
    finally:
        server.stop()


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 10), indent=1))
