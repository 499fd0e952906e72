"""`daedalus bench cv`: the planner's settings chosen by leave-one-family-out cross-validation, never on one trace.

Every setting of a small grid (`GRID`) runs the default planner on the paper's traces and on each generated family
(bench.families). For each family held out in turn, the setting with the best score on everything else (the paper
traces and the other families) is chosen, and judged on the held-out family: that score is what the planner can be
expected to do on a load it was not fitted to. The settings finally adopted are those with the best score on
everything, reported beside how often each fold chose them.

The score of a run puts calm first, then cost (`run_score`): each second over the SLO and each rescale beyond the
budget weighs as much as 1,000 points of worker-seconds (as % of static), each rescale over 18 in 6 hours as 100.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from daedalus.bench.families import FAMILIES
from daedalus.bench.policies import PAPER, Case, Workload, load_all, resolve_workloads, run_all
from daedalus.models.config import LoopConfig
from daedalus.models.errors import ConfigurationError
from daedalus.sim.scenario import SCENARIO_SETTINGS

# The settings searched by default: the envelope's look-back (0: off; at most the 30 minutes the analysis hands over)
# and the largest capacity spread added to an extrapolated scale-out's margin (0: off). Other axes, such as the
# forecast band's width (`forecast_z`) and the rescale price, are searched one at a time with `--grid`
# (docs/benchmark-results.md, issue 38).
GRID: dict[str, tuple[float, ...]] = {"envelope_s": (0.0, 900.0, 1800.0), "capacity_spread_max": (0.0, 0.1)}
RESCALES_6H = 18


def run_score(report: Mapping[str, Any]) -> float:
    """Calm first, then cost: seconds over the SLO and rescales beyond the budget, then rescales over 18 in 6 h
    (pro rata for a shorter run), then worker-seconds as % of static."""
    allowed = RESCALES_6H * report["duration_s"] / 21_600
    return (1000.0 * report["seconds_over_slo"] + 1000.0 * (report.get("budget_exceeded") or 0)
            + 100.0 * max(0.0, report["rescales"] - allowed) + report["worker_seconds_pct_of_static"])


def parse_grid(axes: Sequence[str], option: str = "--grid") -> dict[str, tuple[float, ...]]:
    """`["forecast_z=0.5,1,2", …]` → {"forecast_z": (0.5, 1.0, 2.0), …}: numeric settings of `LoopConfig` only,
    each value checked as the loop would check it."""
    numeric = {f.name for f in dataclasses.fields(LoopConfig) if f.type in ("float", "int")}
    grid: dict[str, tuple[float, ...]] = {}
    for axis in axes:
        name, _, values = axis.partition("=")
        name = name.strip()
        if name in SCENARIO_SETTINGS:
            raise ConfigurationError(f"{option} {axis!r}: {name} is {SCENARIO_SETTINGS[name]}, not a loop setting "
                                     "to set here")
        if name not in numeric:
            raise ConfigurationError(f"{option} {axis!r}: {name!r} is not a numeric loop setting; known: "
                                     f"{', '.join(sorted(numeric))}")
        if name in grid:
            raise ConfigurationError(f"{option} {name} is given twice: give it once"
                                     + (", with its values separated by commas" if option == "--grid" else ""))
        try:
            grid[name] = tuple(float(v) for v in values.split(","))
            for v in grid[name]:
                LoopConfig(**{name: v})
        except ValueError as exc:
            raise ConfigurationError(f"{option} {axis!r}: {exc}") from None
    return grid


def parse_settings(items: Sequence[str]) -> dict[str, float]:
    """`["grace_breach_band=0.5", …]` → {"grace_breach_band": 0.5, …}: one value of a numeric loop setting each, as
    `parse_grid` checks it (a setting a cross-validation run chose, tried on one run)."""
    grid = parse_grid(items, "--set")
    several = [name for name, values in grid.items() if len(values) != 1]
    if several:
        raise ConfigurationError(f"--set {several[0]}: one value, not {len(grid[several[0]])}; `bench cv --grid` "
                                 "searches several")
    return {name: values[0] for name, values in grid.items()}


def settings_grid(grid: Mapping[str, Sequence[float]] = GRID) -> list[dict[str, float]]:
    keys = sorted(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(grid[k] for k in keys))]


def label(setting: Mapping[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(setting.items()))


def family_of(workload: Workload) -> str:
    """The fold a workload belongs to: its family, or `paper` (always trained on, never held out)."""
    return workload.family if workload.family is not None else "paper"


def cross_validate(scores: Mapping[str, Mapping[str, float]], folds: Mapping[str, str]) -> dict[str, Any]:
    """Leave one family out. `scores[setting][workload]`: a run's score; `folds[workload]`: its family (`paper`
    is never held out). Returns per held-out family the setting chosen on the rest and its held-out score, and the
    setting chosen on everything."""
    settings = sorted(scores)
    families = sorted({f for f in folds.values() if f != "paper"})

    def total(setting: str, family: str | None = None, inside: bool = True) -> float:
        """The setting's score summed over `family` (inside) or over all but it; every workload when None."""
        return sum(v for w, v in scores[setting].items() if family is None or (folds[w] == family) == inside)

    held: dict[str, Any] = {}
    for family in families:
        chosen = min(settings, key=lambda s, f=family: (total(s, f, inside=False), s))
        best = min(settings, key=lambda s, f=family: (total(s, f), s))
        held[family] = {"chosen": chosen, "held_out_score": total(chosen, family),
                        "best_in_hindsight": best, "best_score": total(best, family)}
    final = min(settings, key=lambda s: (total(s), s))
    return {"folds": held, "chosen": final, "totals": {s: total(s) for s in settings}}


def run_cv(out: Path, families: Sequence[str] = FAMILIES, family_seeds: Sequence[int] = (0,), seed: int = 0,
           processes: int = 1, grid: Mapping[str, Sequence[float]] = GRID, runs_dir: Path | None = None,
           on_done: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the grid on the paper traces and `families` (each drawn from `family_seeds`), cross-validate, and write
    `cv.json` and `cv.md` into `out`."""
    items = ["paper", *(f"{f}-{s}" for f in families for s in family_seeds)]
    workloads = resolve_workloads(items)
    traces = load_all(workloads)
    folds = {w.name: family_of(w) for w in workloads}
    scores: dict[str, dict[str, float]] = {}
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    for setting in settings_grid(grid):
        name = label(setting)
        cases = [Case("daedalus", w.name, seed) for w in workloads]
        kept = None if runs_dir is None else runs_dir / name.replace(", ", "_").replace("=", "-")
        results = run_all(cases, traces, 12, 0.9, processes, on_done, setting, kept)
        scores[name] = {r["workload"]: run_score(r["report"]) for r in results}
        runs[name] = {r["workload"]: {k: r["report"][k] for k in ("seconds_over_slo", "rescales", "budget_exceeded",
                                                                   "worker_seconds_pct_of_static")}
                      | {"p95_s": r["report"]["latency_s"]["p95"]} for r in results}
    summary = {"grid": {k: list(v) for k, v in grid.items()}, "seed": seed, "family_seeds": list(family_seeds),
               "trained_always": [w.name for w in workloads if folds[w.name] == "paper"],
               "paper": list(PAPER), **cross_validate(scores, folds), "runs": runs, "folds_of": folds}
    out.mkdir(parents=True, exist_ok=True)
    (out / "cv.json").write_text(json.dumps(summary, indent=2))
    (out / "cv.md").write_text(markdown(summary))
    return summary


def markdown(summary: Mapping[str, Any]) -> str:
    """The held-out scores per family and the settings chosen, as markdown."""
    runs = summary["runs"]
    lines = ["| held-out family | setting chosen on the rest | held out: s over SLO / rescales (most) / % static "
             "| best setting in hindsight |", "|---|---|---|---|"]
    for family, fold in summary["folds"].items():
        mine = [r for w, r in runs[fold["chosen"]].items() if summary["folds_of"][w] == family]
        over = sum(r["seconds_over_slo"] for r in mine)
        most = max(r["rescales"] for r in mine)
        pct = sum(r["worker_seconds_pct_of_static"] for r in mine) / len(mine)
        lines.append(f"| {family} | {fold['chosen']} | {over} / {most} / {pct:.1f} | {fold['best_in_hindsight']} |")
    lines += ["", f"Chosen on everything: **{summary['chosen']}**.", "",
              "| setting | total score (lower is better) |", "|---|---|"]
    lines += [f"| {s} | {v:,.1f} |" for s, v in sorted(summary["totals"].items(), key=lambda kv: kv[1])]
    return "\n".join(lines) + "\n"
