"""`daedalus backtest` refusing what it cannot run, in one line and exit 1, before Spark starts (tests/pipeline runs
it on Spark)."""

from __future__ import annotations

import pytest

from daedalus.bench.pipeline import write_fleet
from daedalus.cli import backtest
from tests.cli.cli_support import flat, tiny_app

run = tiny_app(backtest.backtest)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = str(tmp_path_factory.mktemp("lake"))
    write_fleet(url, jobs=2, hours=0.01, workers=2)
    return url


@pytest.mark.parametrize(("args", "says"), [
    (["nope"], "ValidationError: the lake {lake} holds no history of job 'nope'; it holds: job-0000, job-0001"),
    ([], "ConfigurationError: name one JOB or give --all"),
    (["job-0000", "--all"], "ConfigurationError: name one JOB or give --all"),
    (["job-0000", "--policies", "ds2,hpa-99"], "ValueError: no policy 'hpa-99'; known: daedalus,"),
    (["job-0000", "--start", "last tuesday"],
     "ConfigurationError: --start: 'last tuesday' is neither an ISO 8601 time nor epoch seconds"),
])
def test_what_cannot_be_backtested_is_one_line_and_exit_1(lake, tmp_path, args, says) -> None:
    result = run("backtest", *args, "--lake", lake, "--json", tmp_path / "out.json", "--out", tmp_path / "dir")
    assert result.exit_code == 1
    assert says.format(lake=lake) in flat(result.output)
    assert "Traceback" not in result.output
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "dir").exists()


@pytest.mark.parametrize(("text", "epoch"), [("1767225600", 1_767_225_600.0),
                                             ("2026-01-01T00:00:00Z", 1_767_225_600.0),
                                             ("2026-01-01 01:00", 1_767_229_200.0),
                                             ("2026-01-01T02:00:00+01:00", 1_767_229_200.0)])
def test_window_times_are_iso_8601_utc_or_epoch_seconds(text, epoch) -> None:
    assert backtest._epoch("start", text) == epoch
