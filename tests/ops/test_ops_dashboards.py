"""Dashboard contents: the ledger table, forecast against actual with its WAPE, the status and fleet views."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from daedalus.connectors.store import Store
from daedalus.models.forecast.versus import FORECAST_KEEP_S, matched_wape, next_loop_forecast, record_forecast, steps_of
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.text import percent
from daedalus.models.types import Analysis, Decision, Forecast, LedgerEntry
from daedalus.tasks.artifacts import capacity_rows, decision_markdown, forecast_markdown
from daedalus.tasks.dashboards import (
    LEDGER_REASON,
    fleet_rows,
    forecast_plot_markdown,
    forecast_png,
    health,
    ledger_rows,
    status_record,
)
from tests.ops.conftest import T0
from tests.ops.test_ops_approval import _sim_target


def test_ledger_rows_newest_first_with_predicted_and_observed_recovery():
    k = Knowledge.new("j", _sim_target()[0].config)
    k.record(LedgerEntry("j-1", T0, 12, 8, "scale-in", ("r1",), "executed", 95.4, 61.6, "ok",
                         [(T0, "executed"), (T0 + 62, "recovered in 62 s")]))
    k.record(LedgerEntry("j-2", T0 + 900, 8, 10, "scale-out", ("r2",), "rejected", 120.0, None, "",
                         [(T0 + 960, "rejected by ops")]))
    rows = ledger_rows(k)
    assert [r["decision"] for r in rows] == ["j-2", "j-1"]
    assert rows[1] == {"time (UTC)": "2026-01-01 00:00", "scale-out": "12 → 8", "what happened": "executed",
                       "predicted / observed recovery": "95 s / 62 s", "verdict": "", "reason": "r1",
                       "decision": "j-1"}
    assert rows[0]["predicted / observed recovery"] == "2 min / —"


def test_tables_for_people_never_show_inf_and_keep_reasons_short():
    # Issue 14 item 5: "inf s" in the ledger, a reason column that needed sideways scrolling.
    k = Knowledge.new("j", _sim_target()[0].config)
    reason = "C_4 = 310,000 tuples/s is below the forecast peak of 420,000 tuples/s " * 4
    k.record(LedgerEntry("j-1", T0, 4, 6, "scale-out", (reason,), "executed", float("inf"), None, "", []))
    (row,) = ledger_rows(k)
    assert row["predicted / observed recovery"] == "never / —" and "inf" not in str(row)
    assert len(row["reason"]) == LEDGER_REASON and row["reason"].endswith("…")
    assert ledger_rows(k, full_reasons=True)[0]["reason"] == reason

    a = Analysis(now=T0, scaleout=2, avg_workload=150_000.0, lag=1234.0, capacities=(110_000.4, 215_000.0, 318_000.0),
                 observed=(True, True, False), forecast=Forecast(T0, (), "linear", 3e-5),
                 recovery_times=(float("inf"), 95.2, 40.0))
    rows = capacity_rows(a, recommended=3)
    assert list(rows[0]) == ["scale-out", "now / recommended", "capacity (tuples/s)", "predicted recovery",
                             "capacity from"]
    assert rows[0]["capacity (tuples/s)"] == "110,000" and rows[0]["predicted recovery"] == "never"
    assert [r["now / recommended"] for r in rows] == ["", "now", "recommended"]
    assert [r["capacity from"] for r in rows] == ["observed", "observed", "estimated"]
    rows = capacity_rows(replace(a, observed_load=(1.0, 0.416, 0.0)))
    assert [r["capacity from"] for r in rows] == ["observed at 100 % load", "observed at 42 % load", "estimated"]
    assert "WAPE of the previous forecast: < 0.1 %" in forecast_markdown("j", a)
    d = Decision("j-1", T0, "scale-out", 2, 3, ("C_2 below the forecast peak",), float("inf"))
    md = decision_markdown("j", a, d, None, 7)
    assert md.startswith("# j: Scale out — 2 → 3") and "**recommended scale-out 3** (now 2)" in md
    assert "150,000 tuples/s" in md and "predicted recovery after the rescale: never" in md and "inf" not in md


def test_forecasts_are_kept_as_step_means_for_two_hours():
    assert steps_of([1.0] * 30 + [3.0] * 30 + [5.0] * 10) == [1.0, 3.0]
    history = None
    for i in range(300):
        history = record_forecast(history, Forecast(T0 + 60 * i, tuple([100.0 + i] * 900), "arima", None))
    assert len(history) == FORECAST_KEEP_S // 60
    assert history[-1] == {"start": T0 + 60 * 299, "method": "arima", "values": [399.0] * 30}
    assert record_forecast(history, Forecast(T0 + 60 * 300, (), "none", None))[-1]["start"] == T0 + 60 * 299
    t, y = next_loop_forecast(history[-2:])
    np.testing.assert_array_equal(t, [T0 + 60 * 298, T0 + 60 * 298 + 30, T0 + 60 * 299, T0 + 60 * 299 + 30])
    np.testing.assert_array_equal(y, [398, 398, 399, 399])


def test_wape_against_the_actual_step_within_half_a_step():
    actual_t, actual_y = np.array([0.0, 30, 60, 90]), np.array([100.0, 200, 300, np.nan])
    # pairs (100, 110), (200, 180), (300, 300): Σ|y − ŷ| / Σ|y| = 30 / 600; 95 has no finite step within 15 s
    assert matched_wape(actual_t, actual_y, np.array([5.0, 35, 64, 95]), np.array([110.0, 180, 300, 1])) == 0.05
    assert matched_wape(actual_t, actual_y, np.array([500.0]), np.array([1.0])) is None
    assert matched_wape(np.array([]), np.array([]), np.array([1.0]), np.array([1.0])) is None


def _iterations(n: int):
    target, sim = _sim_target()
    k = Knowledge.new("sim", target.config)
    history = None
    sim.advance(600)
    its = []
    for _ in range(n):
        it = iterate(target, k, PLAIN)
        history = record_forecast(history, it.analysis.forecast)
        its.append(it)
        sim.advance(60)
    return k, its, history


def test_forecast_plot_and_status_from_real_iterations(tmp_path):
    k, its, history = _iterations(8)
    png, w = forecast_png("sim", k, history, its[-1].analysis.forecast)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and 5_000 < len(png) < 200_000
    assert png[16:24] == (1275).to_bytes(4, "big") + (720).to_bytes(4, "big")  # IHDR: width, height in pixels
    assert w is not None and 0 <= w < 0.25  # a smooth sine: the forecasts each loop relied on were close
    md = forecast_plot_markdown("sim", png, w, its[-1].analysis.forecast)
    assert f"**{percent(w)}**" in md and "](data:image/png;base64,iVBORw0KGgo" in md

    record = status_record(its[-1], k, "auto", None, T0)
    assert (record["job"], record["mode"], record["current"], record["health"]) == ("sim", "auto",
                                                                                 its[-1].decision.current, "ok")
    assert record["last_action"]["state"] == "executed" and record["loops"] == 8
    assert health(its[-1], k, "blackout window 09:00–17:00 UTC") == "not acting: blackout window 09:00–17:00 UTC"
    k.paused = True
    assert health(its[-1], k, None) == "paused (kill switch for this job)"

    store = Store(str(tmp_path / "store"))
    store.job("sim").write_json("status.json", record)
    assert store.job("sim").status() == record
    rows = fleet_rows([("sim", "auto"), ("new", "approve")], store, T0 + 30)
    assert list(rows[0])[:3] == ["job", "health", "scale-out"]  # what matters first, visible at 1,400 px
    assert rows[0]["scale-out"].startswith(str(record["current"])) and rows[0]["health"] == "ok"
    assert rows[1]["health"] == "no loop has run yet" and rows[1]["mode"] == "approve"
    assert fleet_rows([("sim", "auto")], store, T0 + 600)[0]["health"] == "stale: no loop for 10 min"


def test_status_right_after_an_operators_action_shows_the_new_scale_out():
    # Issue 14 item 3: right after executing 6 → 10 the status still said "keep 6".
    from daedalus.models.loop.messages import ControlMessage

    target, sim = _sim_target()
    k = Knowledge.new("sim", target.config)
    sim.advance(600)
    iterate(target, k, PLAIN)
    sim.advance(60)
    before = sim.scaleout
    manual = ControlMessage("scale-1", "sim", "scale", sim.now, {"scaleout": 10, "reason": "r", "operator": "o"})
    it = iterate(target, k, PLAIN, [manual])
    assert it.action.state == "executed" and sim.scaleout == 10 and it.decision.current == before
    record = status_record(it, k, "auto", None, T0)
    assert (record["current"], record["recommended"]) == (10, 10)
    assert record["last_action"]["to"] == 10


def test_news_at_most_every_30_wall_seconds_so_a_fast_simulation_does_not_flood_the_server(monkeypatch, tmp_path):
    # Issue 14 item 1: the demo runs 360 loops in minutes; each 5th rendered and stored a PNG.
    from daedalus.tasks import publish as publishing

    k, its, _ = _iterations(1)  # the first loop has news
    seen: list[bool] = []
    wall = iter([T0, T0 + 5, T0 + 40])

    class Clock:
        def now(self) -> float:
            return next(wall)

    monkeypatch.setattr(publishing, "WALL", Clock())
    monkeypatch.setattr(publishing, "decision_artifacts", lambda *args: seen.append(args[5]))  # news
    monkeypatch.setattr(publishing, "create_markdown_artifact", lambda **kw: None)
    store = Store(str(tmp_path / "store")).job("sim")
    for _ in range(3):
        k.loops = 6  # a loop with news by the count (6 % PLOT_EVERY == 1)
        publishing.publish.fn(its[-1], k, store, "auto", None, 1)
    assert seen == [True, False, True]
    assert store.status()["news_wall"] == T0 + 40


def test_the_forecast_plot_before_any_data_draws_no_legend_and_leaves_no_figure_open():
    # Found by the fault suite: a job holding from its first loop drew an empty legend (a matplotlib warning that
    # failed the publish task) and left its figure open, until pyplot warned of more than 20.
    import matplotlib.pyplot as plt

    from daedalus.models.config import LoopConfig

    k = Knowledge.new("idle", LoopConfig())
    before = len(plt.get_fignums())
    png, w = forecast_png("idle", k, [], Forecast(T0, (), "none", None))
    assert png.startswith(b"\x89PNG") and w is None
    assert len(plt.get_fignums()) == before
