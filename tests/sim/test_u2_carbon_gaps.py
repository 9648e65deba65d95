"""A gap in a carbon-intensity series is kept but not silent: one warning per load, and
``CarbonSeries.gaps`` lists it."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from iro_fed.sim.signals import CARBON_FILES, data_dir, load_carbon_csv, parse_time

LOGGER = "iro_fed.sim.signals"


def _write(path: Path, header: str, rows: list[tuple[str, float]]) -> Path:
    path.write_text(header + "\n" + "".join(f"{t},{v}\n" for t, v in rows), encoding="utf-8")
    return path


def _quarter_hours(start: str, count: int) -> list[str]:
    t0 = parse_time(start)
    return [np.datetime_as_string(np.datetime64(int(t0 + 900 * i), "s"), unit="s").replace("T", " ")
            for i in range(count)]


def _gap_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_a_four_hour_hole_in_a_quarter_hour_series_warns_once_with_the_numbers(tmp_path, caplog):
    # 00:00 .. 02:00 every 15 min, a hole to 06:00, 06:00 .. 07:00, a 75 min hole, 08:15 .. 09:00.
    times = (_quarter_hours("2020-01-01 00:00:00", 9) + _quarter_hours("2020-01-01 06:00:00", 5)
             + _quarter_hours("2020-01-01 08:15:00", 4))
    values = [100.0 + i for i in range(len(times))]
    path = _write(tmp_path / "my_grid.csv", "Time,Carbon Intensity", list(zip(times, values, strict=True)))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        s = load_carbon_csv(path)
    records = _gap_records(caplog)
    assert len(records) == 1
    msg = records[0].getMessage()
    assert str(path) in msg
    assert "2 gap(s)" in msg
    assert "15 min step" in msg
    assert "starts 2020-01-01 02:00:00" in msg and "4 h 00 min" in msg and "to 2020-01-01 06:00:00" in msg
    # Recorded on the series, values as given, the value before the hole held across it.
    assert s.gaps == (
        (parse_time("2020-01-01 02:00:00"), parse_time("2020-01-01 06:00:00")),
        (parse_time("2020-01-01 07:00:00"), parse_time("2020-01-01 08:15:00")),
    )
    assert s.values.tolist() == values
    assert s.at(parse_time("2020-01-01 05:59:00")) == 108.0


def test_electricity_maps_hourly_file_with_a_gap_warns(tmp_path, caplog):
    header = "Datetime (UTC),Carbon Intensity gCO₂eq/kWh (direct),Carbon Intensity gCO₂eq/kWh (LCA)"
    hours = [f"2022-01-01 {h:02d}:00:00" for h in (0, 1, 2, 3, 10, 11, 12)]
    path = tmp_path / "ES_gap.csv"
    path.write_text(header + "\n" + "".join(f"{t},{i},{i + 50}\n" for i, t in enumerate(hours)), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        s = load_carbon_csv(path, column="lca")
    (record,) = _gap_records(caplog)
    assert "1 gap(s)" in record.getMessage() and "7 h 00 min" in record.getMessage()
    assert "starts 2022-01-01 03:00:00" in record.getMessage()
    assert s.gaps == ((parse_time("2022-01-01 03:00:00"), parse_time("2022-01-01 10:00:00")),)


def test_the_threshold_is_more_than_three_median_steps(tmp_path, caplog):
    # A 45 min step in 15 min data (3 x) is not a gap; 46 min is.
    base = _quarter_hours("2020-01-01 00:00:00", 4)
    at_three = _write(tmp_path / "three.csv", "Time,Carbon Intensity",
                      [(t, 1.0) for t in base] + [("2020-01-01 01:30:00", 2.0), ("2020-01-01 01:45:00", 2.0)])
    over = _write(tmp_path / "over.csv", "Time,Carbon Intensity",
                  [(t, 1.0) for t in base] + [("2020-01-01 01:31:00", 2.0), ("2020-01-01 01:46:00", 2.0)])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert load_carbon_csv(at_three).gaps == ()
        assert not _gap_records(caplog)
        assert len(load_carbon_csv(over).gaps) == 1
    assert len(_gap_records(caplog)) == 1


def test_mixed_quarter_and_half_hour_steps_are_not_gaps(tmp_path, caplog):
    # gb_ci.csv mixes 15 and 30 min steps; neither is a hole.
    rows = [("2020-01-01 00:00:00", 1.0), ("2020-01-01 00:15:00", 2.0), ("2020-01-01 00:45:00", 3.0),
            ("2020-01-01 01:00:00", 4.0), ("2020-01-01 01:30:00", 5.0), ("2020-01-01 01:45:00", 6.0)]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        s = load_carbon_csv(_write(tmp_path / "mixed.csv", "Time,Carbon Intensity", rows))
    assert s.gaps == ()
    assert not _gap_records(caplog)


@pytest.mark.skipif(not (data_dir() / "carbon").exists(), reason="shared data not present")
@pytest.mark.parametrize("file", sorted(CARBON_FILES.values()))
def test_shipped_carbon_files_have_no_gaps(file, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        s = load_carbon_csv(data_dir() / "carbon" / file)
    assert s.gaps == ()
    assert not _gap_records(caplog)
