"""Every scenario refuses numeric parameters outside what they mean, naming the setting, before
it builds anything (counts >= 0, rates and factors >= 0 and finite, weights >= 0, ...)."""

from __future__ import annotations

import pytest

from iro_fed.sim import SimConfigError
from iro_fed.sim.scenarios import build_scenario
from tests.sim.helpers import needs_data


@pytest.mark.parametrize(
    ("scenario", "params", "message"),
    [
        # bank: before, these built a scenario (no nodes, no jobs, negative traffic, or a
        # pool of -2 nodes) without a word
        ("bank", {"zone_a_nodes": -2}, "setting 'zone_a_nodes': must be between 0 and 10000, got -2"),
        ("bank", {"zone_b_nodes": -1}, "setting 'zone_b_nodes'"),
        ("bank", {"cloud_nodes": 10**6}, "setting 'cloud_nodes': must be between 0 and 10000"),
        ("bank", {"night_jobs": -5}, "setting 'night_jobs': must be between 0 and 10000, got -5"),
        ("bank", {"day_jobs_per_hour": -1}, "setting 'day_jobs_per_hour'"),
        ("bank", {"promo_factor": -3.0}, "setting 'promo_factor': must be between 0 and 1e+06, got -3.0"),
        ("bank", {"peak_rps": -1.0}, "setting 'peak_rps'"),
        ("bank", {"peak_rps": 1e300}, "setting 'peak_rps': must be between 0 and 1e+09"),  # inf traffic
        ("bank", {"promo_day": -2}, "setting 'promo_day': must be >= -1, got -2"),
        ("bank", {"w_carbon": -1.0}, "setting 'w_carbon': must be >= 0, got -1.0"),
        # edge-iot
        ("edge-iot", {"edge_nodes": -1}, "setting 'edge_nodes': must be between 0 and 10000"),
        ("edge-iot", {"cloud_nodes": -1}, "setting 'cloud_nodes'"),
        ("edge-iot", {"sensor_rps": -1.0}, "setting 'sensor_rps': must be between 0 and 1e+09, got -1.0"),
        ("edge-iot", {"jobs_per_hour": -3}, "setting 'jobs_per_hour'"),
        ("edge-iot", {"w_latency": -0.5}, "setting 'w_latency': must be >= 0"),
        # openb: nodes=-5 silently meant all nodes; time_scale=1e-320 raised OverflowError
        ("openb", {"nodes": -5}, "setting 'nodes': must be >= 0, got -5"),
        ("openb", {"time_scale": -1.0}, "setting 'time_scale'"),
        ("openb", {"time_scale": 1e-320}, "setting 'time_scale': must be 0 (fit the run) or between 1e-06 and 1e+06"),
        ("openb", {"duration_scale": 0.0}, "setting 'duration_scale': must be between 1e-06 and 1e+06, got 0.0"),
        # promo-surge's own checks were there; its weights were not
        ("promo-surge", {"w_carbon": -2.0}, "setting 'w_carbon': must be >= 0"),
    ],
)
def test_out_of_range_parameters_are_refused_by_name(scenario, params, message):
    # (Checked before any data file is read: no shared data needed.)
    with pytest.raises(SimConfigError) as err:
        build_scenario(scenario, seed=1, hours=1, **params)
    assert message in str(err.value)


@needs_data
@pytest.mark.parametrize(
    ("scenario", "params"),
    [
        ("bank", {"zone_b_nodes": 0, "cloud_nodes": 0, "night_jobs": 0, "promo_day": -1, "promo_factor": 0.5,
                  "peak_rps": 0.0, "w_carbon": 0.0}),
        ("edge-iot", {"cloud_nodes": 0, "jobs_per_hour": 0, "sensor_rps": 0.0}),
        ("openb", {"nodes": 0, "time_scale": 0.0, "duration_scale": 2.0}),
    ],
)
def test_the_edges_of_the_ranges_still_build(scenario, params):
    sc = build_scenario(scenario, seed=1, hours=1, **params)
    assert sc.steps == 60
