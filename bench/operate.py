"""`daedalus bench operate`: do the loops keep their minute and do operators' answers land, with the pipeline due?

The scenario of issue 36, on this machine: a local Prefect server (SQLite) and one `daedalus worker` serving every
work queue of the pool, as a default `daedalus deploy` sets it up; three simulated jobs (two in `approve` mode, one
`auto`, speed-up 10) with the metric-history lake and the background and pipeline flows deployed; a
`validate-metrics` run (Spark) created every `pipeline_every_s` on top of its own schedule, so the pipeline is
always due. Meanwhile an operator answers every proposal the moment it appears (approve and reject in turn), scales
the automatic job by hand and reads `status`, each command timed as a subprocess, as a person would run it.

Figures: the loops' start delays (start − scheduled) and their states (a loop cancelled by the one-run-per-job
rule is counted), the pipeline's runs, each command's time, whether every answer reached the ledger dated when it
was given, and what the server and worker logs hold ("database is locked", websocket errors).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from daedalus.bench.schedule import _percentiles, _runs, summarise
from daedalus.runtime.local_prefect import start_server

POOL = "bench-operate"
DAEDALUS = str(Path(sys.executable).parent / "daedalus")
SETTLE_S = 120.0  # runs scheduled before the worker was warm are not counted
JOBS = (("payments", "approve", 1), ("orders", "approve", 2), ("clicks", "auto", 3))


def operate_jobs_file(path: Path, speedup: float = 10.0) -> Path:
    """The three jobs of the scenario; the approve-mode ones with the paper's planner, which proposes on its first
    loop (12 → 11), so there is something to answer from the start."""
    doc = {"defaults": {"engine": "sim", "scale_target": {"kind": "sim", "name": "sim"},
                        "scaleout": {"min": 1, "max": 12}, "approval_timeout": "10m"},
           "jobs": [{"name": name, "mode": mode, "sim": {"seed": seed, "speedup": speedup},
                     **({"planner": "daedalus-paper"} if mode == "approve" else {})} for name, mode, seed in JOBS]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _command(env: dict[str, str], *args: str) -> dict[str, Any]:
    """Run one `daedalus` command as an operator would; its wall time, exit code and JSON line (if any)."""
    started = time.perf_counter()
    done = subprocess.run([DAEDALUS, *args], env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - started
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines and args[0] in ("approve", "reject", "scale") else None
    except json.JSONDecodeError:
        result = None
    return {"command": args[0], "seconds": round(seconds, 2), "rc": done.returncode, "result": result,
            "error": done.stderr.strip()[-300:] if done.returncode else ""}


def _create_run(api_url: str, deployment: str) -> None:
    import httpx

    found = httpx.post(f"{api_url}/deployments/filter", json={"deployments": {"name": {"any_": [deployment]}}},
                       timeout=30).json()
    if found:
        httpx.post(f"{api_url}/deployments/{found[0]['id']}/create_flow_run", json={}, timeout=30)


def _log_count(home: Path, text: str) -> int:
    return sum(p.read_text(errors="replace").count(text) for p in home.glob("*.log"))


def run_operate_bench(minutes: float, console: Console, keep: Path | None = None, pipeline_every_s: float = 180.0,
                      speedup: float = 10.0) -> dict[str, Any]:
    """Run the scenario for `minutes`; the figures (see the module's docstring)."""
    from daedalus.connectors.store import Store

    tmp = None if keep else tempfile.TemporaryDirectory(prefix="daedalus-bench-operate-")
    root = keep or Path(tmp.name)  # type: ignore[union-attr]
    root.mkdir(parents=True, exist_ok=True)
    console.print(f"Starting a local Prefect server (SQLite) in {root} ...")
    server = start_server(root / "prefect")
    env = {**server.env(), "COLUMNS": "200"}
    os.environ.update({"PREFECT_API_URL": server.api_url, "PREFECT_HOME": str(server.home)})
    try:
        jobs_file = operate_jobs_file(root / "jobs.yaml", speedup)
        store = str(root / "store")
        deploy = subprocess.run([DAEDALUS, "deploy", str(jobs_file), "--pool", POOL, "--store", store, "--lake",
                                 str(root / "lake")], env=env, capture_output=True, text=True, timeout=600)
        if deploy.returncode:
            raise RuntimeError(f"daedalus deploy failed: {deploy.stderr[-2000:]}")
        console.print("Deployed; starting `daedalus worker` (every queue of the pool) ...")
        server.start_worker(POOL, prefork=True)
        start = time.time()
        end = start + 60 * minutes
        commands: list[dict[str, Any]] = []
        answered: dict[str, dict[str, Any]] = {}  # proposal → the answer's JSON
        next_pipeline, next_scale, turn = start + 60.0, start + 120.0, 0
        while time.time() < end:
            now = time.time()
            if now >= next_pipeline:
                _create_run(server.api_url, "validate-metrics")
                next_pipeline += pipeline_every_s
            for name, mode, _ in JOBS:
                k = Store(store).job(name).load().knowledge if mode == "approve" else None
                if k is None or k.pending is None or k.pending.id in answered:
                    continue
                verb = ("approve", "reject")[turn % 2]
                turn += 1
                c = _command(env, verb, k.pending.id, "--operator", "bench", "--reason", f"bench {verb}")
                commands.append(c)
                if c["rc"] == 0:
                    answered[k.pending.id] = c["result"]
            if now >= next_scale:
                commands.append(_command(env, "scale", "clicks", str(6 + turn % 3), "--reason", "bench",
                                         "--operator", "bench"))
                commands.append(_command(env, "status"))
                next_scale += 300.0
            time.sleep(5)
        time.sleep(20)  # let the last runs finish before counting them
        loops = asyncio.run(_runs("mape-k", start, end))
        pipeline = asyncio.run(_runs("validate-metrics", start - 60, end))
        lost, late, pending_at_end = [], [], []
        for proposal, result in answered.items():
            job = result["job"]
            entry = Store(store).job(job).load().knowledge.entry(proposal)  # type: ignore[union-attr]
            given = datetime.fromisoformat(result["given"]).timestamp()
            events = [t for t, what in (entry.events if entry else []) if what.startswith(("approved", "rejected"))]
            waiting = [m for _, m in Store(store).job(job).pending() if m.body.get("proposal") == proposal]
            if not events and waiting:  # given near the end: still in the inbox when the server stopped
                pending_at_end.append(proposal)
            elif not events:
                lost.append(proposal)
            elif abs(events[0] - given) > 1:
                late.append(proposal)
        by_command: dict[str, list[float]] = {}
        for c in commands:
            by_command.setdefault(c["command"], []).append(c["seconds"])
        return {
            "minutes": minutes, "speedup": speedup, "cores": os.cpu_count(), "pipeline_every_s": pipeline_every_s,
            "loops": summarise(loops, start + SETTLE_S, end),
            "pipeline": {"runs": len(pipeline), "states": _states(pipeline),
                         "run_s": _percentiles([r.total_run_time.total_seconds() for r in pipeline
                                                if r.state and r.state.is_final()])},
            "commands": {name: {"n": len(s), **_percentiles(s)} for name, s in by_command.items()},
            "command_failures": [c for c in commands if c["rc"] != 0],
            "answers": len(answered), "answers_lost": lost, "answers_misdated": late,
            "answers_waiting_at_end": pending_at_end,
            "server_log_database_locked": _log_count(server.home, "database is locked"),
            "worker_log_keepalive_failed": _log_count(server.home, "keepalive ping failed"),
        }
    finally:
        server.stop()
        if tmp is not None:
            tmp.cleanup()


def _states(runs: list[Any]) -> dict[str, int]:
    states: dict[str, int] = {}
    for r in runs:
        name = r.state.name if r.state else "?"
        states[name] = states.get(name, 0) + 1
    return states


def operate_table(report: dict[str, Any]) -> Table:
    loops, pipeline = report["loops"], report["pipeline"]
    d = loops["start_delay_s"]
    t = Table(title=f"3 jobs (2 approve, 1 auto, speed-up {report['speedup']:g}) for {report['minutes']:g} min with "
                    f"validate-metrics due every {report['pipeline_every_s']:g} s, one `daedalus worker`, SQLite, "
                    f"{report['cores']} cores")
    t.add_column("figure")
    t.add_column("value", justify="right")
    rows = [
        (f"loop runs due (after {SETTLE_S / 60:g} min warm-up)", str(loops["due"])),
        ("loop states", ", ".join(f"{k} {v}" for k, v in sorted(loops["states"].items()))),
        ("loop start delay p50 / p95 / max", f"{d['p50']} / {d['p95']} / {d['max']} s"),
        ("pipeline runs (validate-metrics)", ", ".join(f"{k} {v}" for k, v in sorted(pipeline["states"].items()))
         or "none"),
        ("pipeline run time p50 / max", f"{pipeline['run_s']['p50']} / {pipeline['run_s']['max']} s"),
        *((f"`daedalus {name}` p50 / max (n={c['n']})", f"{c['p50']} / {c['max']} s")
          for name, c in sorted(report["commands"].items())),
        ("commands that failed", str(len(report["command_failures"]))),
        ("answers given / lost / misdated / still in the inbox at the end",
         f"{report['answers']} / {len(report['answers_lost'])} / {len(report['answers_misdated'])} / "
         f"{len(report.get('answers_waiting_at_end', []))}"),
        ("server log: 'database is locked'", str(report["server_log_database_locked"])),
        ("worker log: 'keepalive ping failed'", str(report["worker_log_keepalive_failed"])),
    ]
    for row in rows:
        t.add_row(*row)
    return t
