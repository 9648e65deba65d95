"""The 2022 carbon series on the run's calendar (leap days), promo-surge's clock hours, and
hostile ``iro simulate`` input (each fails on the code before its fix)."""

from __future__ import annotations

import csv
from functools import cache

import numpy as np
import pytest

from iro_fed.cli import main
from iro_fed.sim import SimConfig, SimConfigError
from iro_fed.sim.signals import data_dir

from .helpers import needs_data

LCA = "Carbon Intensity gCO₂eq/kWh (LCA)"  # the runs read the life-cycle basis by default


@cache
def _emaps(zone: str) -> dict[str, float]:
    with (data_dir() / "carbon" / f"{zone}_2022_hourly.csv").open(encoding="utf-8-sig", newline="") as handle:
        return {row["Datetime (UTC)"]: float(row[LCA]) for row in csv.DictReader(handle)}


@needs_data
def test_2022_series_follow_the_runs_calendar_across_february_29():
    from iro_fed.sim.scenarios import build_scenario

    sc = build_scenario("edge-iot", seed=1, hours=72, start="2020-02-28 00:00:00")
    h = sc.history
    madrid, oslo = sc.carbon["edge-madrid"], sc.carbon["edge-oslo"]
    es, no = _emaps("ES"), _emaps("NO")
    assert madrid[h + 12 * 60] == es["2022-02-28 12:00:00"]
    # 2020-02-29 (2022 has none) reads 2022-02-28 again.
    assert madrid[h + 36 * 60] == es["2022-02-28 12:00:00"]
    # 2020-03-01 reads 2022-03-01: a fixed offset from the start read 2022-03-02 from here on.
    assert madrid[h + 48 * 60] == es["2022-03-01 00:00:00"]
    assert oslo[h + 71 * 60] == no["2022-03-01 23:00:00"]
    # The same moment reads the same hour whatever the run's start.
    later = build_scenario("edge-iot", seed=1, hours=24, start="2020-03-01 00:00:00")
    assert np.array_equal(later.carbon["edge-madrid"][later.history:], madrid[h + 48 * 60:])
    assert np.array_equal(later.carbon["edge-oslo"][: later.history], oslo[h + 24 * 60: h + 48 * 60])


@needs_data
def test_a_start_on_february_29_reads_february_28_of_2022():
    from iro_fed.sim.scenarios import build_scenario
    from iro_fed.sim.scenarios.common import carbon_window

    # Was refused ("2022 has no February 29") although a run over the day was not.
    sc = build_scenario("edge-iot", seed=1, hours=2, start="2020-02-29 06:00:00")
    assert sc.carbon["edge-madrid"][sc.history] == _emaps("ES")["2022-02-28 06:00:00"]
    # Another leap year (only the 2022 series cover 2024): March 1 reads March 1.
    w = carbon_window("ES", "2024-02-28 00:00:00", 1440, 72 * 60, 60.0)
    assert w[1440 + 48 * 60] == _emaps("ES")["2022-03-01 00:00:00"]
    assert w[1440 + 24 * 60 + 30] == _emaps("ES")["2022-02-28 00:00:00"]
    # A non-leap year reads month, day and time as they are.
    w = carbon_window("NO", "2021-03-01 05:00:00", 60, 60, 60.0)
    assert w[60] == _emaps("NO")["2022-03-01 05:00:00"] and w[0] == _emaps("NO")["2022-03-01 04:00:00"]


@needs_data
def test_a_2022_series_does_not_wrap_into_another_year():
    from iro_fed.sim.scenarios.common import carbon_window

    with pytest.raises(ValueError, match=r"'ES' covers .*: the run needs 2020-12-30 12:00:00 .. 2021-01-01 12:00:00 .*"
                                         r"within one calendar year \(2020-01-01 00:00:00 .. 2021-01-01 00:00:00 here\)"):
        carbon_window("ES", "2020-12-31 12:00:00", 1440, 24 * 60, 60.0)


@needs_data
@pytest.mark.parametrize(
    ("start", "window", "departure"),
    [
        ("2020-03-06 00:00:00", (600, 720), 1080),  # the default: 10:00-12:00, the sale ends 18:00
        ("2020-03-06 06:00:00", (240, 360), 720),  # was (600, 720): 16:00, counted from the start
        ("2020-03-06 11:00:00", (1380, 1500), 1860),  # past 10:00: the next day's
    ],
)
def test_promo_surge_hours_are_utc_clock_hours(start, window, departure):
    from iro_fed.sim.scenarios import build_scenario

    sc = build_scenario("promo-surge", seed=1, hours=36, start=start)
    assert sc.peak_windows == [window]
    assert all(window[0] <= p.arrival < window[1] for p in sc.pods) and len(sc.pods) > 50
    assert {p.departure for p in sc.pods} == {departure}


@needs_data
def test_promo_surge_over_midnight():
    from iro_fed.sim.scenarios import build_scenario

    sc = build_scenario("promo-surge", seed=1, hours=24, start="2020-03-06 20:00:00", surge_start_h=22.0, sale_end_h=2.0)
    assert sc.peak_windows == [(120, 240)] and {p.departure for p in sc.pods} == {360}


@needs_data
@pytest.mark.parametrize(
    ("params", "message"),
    [
        # A sale that ended inside the surge left the later pods running for ever.
        ({"sale_end_h": 11.0}, "setting 'sale_end_h': the sale ends 1 h after the surge starts"),
        ({"load": 101.0}, "setting 'load': must be > 0 and at most 100"),  # 1e9 looped building pods
        ({"load": -1.0}, "setting 'load'"),
        ({"surge_hours": 0.0}, "setting 'surge_hours'"),
        ({"surge_start_h": 24.0}, "setting 'surge_start_h': a UTC clock hour in [0, 24)"),
        ({"gpu_nodes": 0}, "setting 'gpu_nodes': must be between 1"),
        ({"cpu_nodes": -3}, "setting 'cpu_nodes'"),
    ],
)
def test_promo_surge_refuses_bad_parameters(params, message):
    from iro_fed.sim.scenarios import build_scenario

    with pytest.raises(SimConfigError) as err:
        build_scenario("promo-surge", seed=1, hours=24, **params)
    assert message in str(err.value)


def test_engine_floats_must_be_finite():
    with pytest.raises(SimConfigError, match="setting 'queue_cap': must be a finite number, got inf"):
        SimConfig(queue_cap=float("inf"))
    with pytest.raises(SimConfigError, match="setting 'consolidate_below': must be a finite number, got nan"):
        SimConfig().with_settings({"consolidate_below": "nan"})


@needs_data
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--solver-set", "bogus=1"], "--solver-set bogus: unknown setting for solver 'best-fit'"),  # said --set
        (["--solver-set", "seed=abc"], "--solver-set seed: solver 'best-fit' setting 'seed': cannot read 'abc'"),
        (["--set", "load=nan"], "--set load: must be a finite number, got nan"),  # ran an empty surge
        (["--set", "queue_cap=inf"], "--set queue_cap: must be a finite number, got inf"),
        (["--set", "start=garbage"], "--set start: expected a UTC time"),  # did not name 'start'
        (["--hours", "0.001"], "--hours: must cover at least one step of 60 s, got 0.001"),
    ],
)
def test_simulate_bad_flags_exit_2_naming_them(tmp_path, capsys, args, message):
    out = tmp_path / "report.json"
    base = ["simulate", "--scenario", "promo-surge", "--solver", "best-fit", "--out", str(out)]
    assert main([*base, *(args if "--hours" in args else ["--hours", "1", *args])]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
