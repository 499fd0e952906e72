"""Workload loading: every real format, and every bad input named by file and line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daedalus.data import WORKLOADS
from daedalus.models.errors import WorkloadError
from daedalus.sim.workloads import load_workload, rescale_to_peak, sine_workload


@pytest.fixture(scope="module")
def workloads() -> Path:
    return WORKLOADS


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- real traces --------------------------------------------------------------------------------


def test_paper_sine_trace(workloads: Path) -> None:
    w = load_workload(workloads / "paper" / "sine_60000_6h.csv")
    assert w[0] == 32500
    assert w[1] == 32515
    assert len(w) >= 21600
    assert w.max() <= 60000
    assert w.min() == 5000


def test_paper_sine_matches_sine_workload(workloads: Path) -> None:
    """The file is the sine truncated to whole tuples, so they differ by less than one tuple."""
    w = load_workload(workloads / "paper" / "sine_60000_6h.csv")
    synthetic = sine_workload()
    assert len(synthetic) == len(w) == 21600
    assert np.all((synthetic - w >= -1e-6) & (synthetic - w < 1.0 + 1e-6))


def test_paper_adcount_header(workloads: Path) -> None:
    w = load_workload(workloads / "paper" / "advertising_6h_400K_max.csv")
    assert len(w) == 21601  # seconds 0 … 21600
    assert w[0] == 0
    assert w.max() == 400_000
    assert w[-1] == 18283


def test_per_second_trace_is_truncated_to_hours(workloads: Path) -> None:
    w = load_workload(workloads / "paper" / "tm_6h_100K_max.csv", hours=6)
    assert len(w) == 21600
    assert w[0] == 1986


def test_per_second_trace_too_short_for_the_run(workloads: Path) -> None:
    path = workloads / "paper" / "tm_6h_100K_max.csv"  # 25,000 s
    with pytest.raises(WorkloadError, match="too short for the run") as info:
        load_workload(path, hours=7)  # 25,200 s
    assert str(path) in str(info.value)
    assert "25000" in str(info.value) and "25200" in str(info.value)


def test_recorded_trace_fills_the_null_sample(workloads: Path) -> None:
    """ads_workrate_1s.out has `null` at line 15608 (second 15606): filled from its neighbours."""
    path = workloads / "recorded" / "ads_workrate_1s.out"
    lines = path.read_text().splitlines()
    assert lines[15607].endswith("|null")
    before, after = float(lines[15606].split("|")[1]), float(lines[15608].split("|")[1])
    w = load_workload(path)
    assert len(w) == 21601
    assert w[0] == 96850.0
    assert w[15606] == pytest.approx((before + after) / 2)
    assert np.all(np.isfinite(w))
    assert len(load_workload(path, hours=6)) == 21600


def test_multiday_trace_interpolated_to_one_second(workloads: Path) -> None:
    w = load_workload(workloads / "multiday" / "avazu_5min.csv")
    # 2014-10-21 00:00 … 2014-10-31 22:55 is 10 d 22 h 55 min = 946,500 s, plus second 0.
    assert len(w) == 946_501
    assert w[0] == pytest.approx(107664.09065161944)
    assert w[300] == pytest.approx(104163.3293178291)
    assert w[150] == pytest.approx((107664.09065161944 + 104163.3293178291) / 2)


def test_multiday_trace_compressed_to_six_hours(workloads: Path) -> None:
    w = load_workload(workloads / "multiday" / "taxi_1h.csv", hours=6)
    assert len(w) == 21600
    assert w[0] == pytest.approx(119716.82999045)  # first row of the file
    assert w[-1] == pytest.approx(125292.8708887943)  # last row of the file, on the last second
    # 504 h onto 21,600 points: point 1 is 1,814,400 / 21,599 = 84.0039 s into the trace, on the
    # line between the first two rows (00:00 and 01:00).
    first, second = 119716.82999045262, 111440.9802199512
    assert w[1] == pytest.approx(first + (second - first) * (1_814_400 / 21_599) / 3600)


# --- hand-made traces ---------------------------------------------------------------------------


def test_duplicate_seconds_averaged_and_gaps_interpolated(tmp_path: Path) -> None:
    path = write(tmp_path, "second|count\n0|10\n1|20\n1|40\n4|60\n")
    assert load_workload(path).tolist() == [10, 30, 40, 50, 60]


def test_timestamp_format_with_a_missing_second(tmp_path: Path) -> None:
    path = write(tmp_path, "timestamp|value\n1645633832|100\n1645633833|null\n1645633835|400\n")
    assert load_workload(path).tolist() == [100, 200, 300, 400]


def test_date_format_interpolation_and_compression(tmp_path: Path) -> None:
    path = write(tmp_path, "date,messages\n2020-01-01 00:00:00,0\n2020-01-01 00:05:00,300\n")
    w = load_workload(path)
    assert len(w) == 301
    assert w[100] == 100
    assert load_workload(path, hours=3 / 3600).tolist() == [0, 150, 300]


def test_utf8_bom_header(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffsecond|count\n0|5\n1|7\n".encode())
    assert load_workload(path).tolist() == [5, 7]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty workload file"),
        ("\n\n", "empty workload file"),
        ("second|count\n", r"no data after the header \(line 1\)"),
        ("second|count\n0|1\n1|lots\n", r"line 3: non-numeric value 'lots'"),
        ("second|count\n0|1\n1|2\n2|-5\n", "line 4: negative rate -5"),
        ("timestamp|value\n100|NaN\n", "line 2: NaN value"),
        ("timestamp|value\n100|1\n101|inf\n", "line 3: infinite value"),
        ("second|count\n0|1\nabc|2\n", "line 3: non-numeric second 'abc'"),
        ("second|count\n0|1\n1|2|3\n", "line 3: expected 2 fields"),
        ("date,messages\n2020-01-01 00:00:00,1\nyesterday,2\n", "line 3: not a date 'yesterday'"),
        ("second|count\n0|null\n", "every sample is missing"),
        ("second|count\n0|0\n1|0\n", "the rate is 0 throughout: nothing to scale"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(WorkloadError, match=message) as info:
        load_workload(path)
    assert str(path) in str(info.value)


def test_unknown_format_names_header_and_known_formats(tmp_path: Path) -> None:
    path = write(tmp_path, "time;rate\n0;1\n")
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    text = str(info.value)
    assert str(path) in text
    assert "'time;rate'" in text
    for known in ("second|<name>", "timestamp|<name>", "date,<name>"):
        assert known in text


def test_missing_file_is_a_workload_error(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="cannot read"):
        load_workload(tmp_path / "absent.csv")


def test_hours_must_be_positive(tmp_path: Path) -> None:
    path = write(tmp_path, "second|count\n0|1\n")
    with pytest.raises(ValueError, match="hours"):
        load_workload(path, hours=0)


# --- rescaling and the synthetic sine -------------------------------------------------------------


def test_rescale_to_peak() -> None:
    assert rescale_to_peak(np.array([1.0, 2.0, 4.0]), 100).tolist() == [25, 50, 100]
    with pytest.raises(ValueError, match="peak"):
        rescale_to_peak(np.array([1.0]), 0)
    with pytest.raises(ValueError, match="maximum"):
        rescale_to_peak(np.zeros(3), 10)


def test_sine_workload_shape() -> None:
    w = sine_workload()
    assert len(w) == 21600
    assert w[0] == 32500  # starts at the mid value …
    assert w[1] > w[0]  # … and rises
    assert w[2700] == pytest.approx(60000)  # peak a quarter period in
    assert w[8100] == pytest.approx(5000)  # trough at three quarters
    assert w[10800] == pytest.approx(32500)  # second period starts
    assert sine_workload(hours=1, period_s=600, low=0, high=10)[150] == pytest.approx(10)


def test_sine_workload_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="low"):
        sine_workload(low=10, high=5)
    with pytest.raises(ValueError, match="period_s"):
        sine_workload(period_s=0)


def test_a_run_whose_hours_hold_no_positive_rate_is_refused(tmp_path: Path) -> None:
    """Positive after the run's span only: the span is what gets scaled to the peak, so it is what must be > 0."""
    path = write(tmp_path, "second|count\n0|0\n1|0\n2|0\n3|7\n")
    assert load_workload(path).tolist() == [0, 0, 0, 7]
    with pytest.raises(WorkloadError, match=r"the rate is 0 throughout in the first 0.000833333 h"):
        load_workload(path, hours=3 / 3600)
