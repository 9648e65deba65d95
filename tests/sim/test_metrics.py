"""Metric definitions on hand-made numbers, and the service model's monotonicity."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.sim.engine import service_latency
from iro_fed.sim.metrics import histogram_percentile, pending_stats, weighted_percentile


def test_weighted_percentile_hand_cases():
    assert weighted_percentile(np.array([1, 2, 3, 4]), np.array([1, 1, 1, 97]), 99) == 4
    assert weighted_percentile(np.array([10, 20]), np.array([99, 1]), 99) == 10
    assert weighted_percentile(np.array([10, 20]), np.array([99, 1]), 99.5) == 20
    assert weighted_percentile(np.array([5.0]), np.array([0.0]), 99) is None
    # Plain percentile of 100 equally weighted values 1..100: P99 = 99.
    assert weighted_percentile(np.arange(1, 101), np.ones(100), 99) == 99


def test_histogram_percentile_upper_bin_edge():
    hist = np.zeros(500)
    hist[10] = 98  # 98 requests at 10-11 ms
    hist[300] = 2  # 2 at 300-301 ms
    assert histogram_percentile(hist, 98) == 11.0
    assert histogram_percentile(hist, 99) == 301.0
    assert histogram_percentile(np.zeros(10), 99) is None


def test_pending_stats_hand_case():
    ready = np.array([0, 0, 5, 12, -1, 15])
    placed = np.array([0, 3, 5, 14, -1, -1])  # pod 1 waits 3, pod 3 waits 2, pod 5 never placed
    in_peak = np.array([False, False, False, True, False, True])
    s = pending_stats(ready, placed, in_peak, step_min=1.0, until=20)
    assert s["ready_pods"] == 5
    assert s["pending_pods"] == 3
    assert s["pending_pct"] == pytest.approx(60.0)
    assert s["pending_at_peak_pct"] == pytest.approx(100.0)
    # Pod 5 waits from 15 to the end of the run (20): (3 + 2 + 5) / 3; the placed ones alone 2.5.
    assert s["mean_pending_min"] == pytest.approx(10 / 3)
    assert s["mean_pending_placed_min"] == pytest.approx(2.5)
    assert s["never_placed"] == 1
    # Per pod: pod 5 left (dropped) at 17; 30 s steps halve the minutes.
    until = np.array([20, 20, 20, 20, 20, 17])
    assert pending_stats(ready, placed, in_peak, step_min=0.5, until=until)["mean_pending_min"] == pytest.approx(7 / 6)


def _lat(rho_p, util, sla=100.0):
    n = len(rho_p)
    return service_latency(np.full(n, 5.0), np.full(n, 10.0), np.asarray(rho_p, float), np.asarray(util, float),
                           np.full(n, sla), np.asarray(rho_p, float) * 100.0, 60.0, 50.0)


def test_service_model_hand_values_and_monotone():
    lat, req, served = _lat([0.5, 0.5, 1.5], [0.0, 0.8, 0.0], sla=600.0)
    # 5 + 10 / (1 - 0.5); node busier than the replica: 5 + 10 / 0.2; overloaded: capped at 50 x 10.
    assert lat.tolist() == pytest.approx([25.0, 55.0, 505.0])
    assert served.tolist() == pytest.approx([req[0], req[1], req[2] / 1.5])
    grid = np.linspace(0, 1.2, 25)
    lat_u, _, _ = _lat(np.full(25, 0.3), np.minimum(grid, 1.0))
    assert np.all(np.diff(lat_u) >= 0)
    lat_r, req_r, served_r = _lat(grid, np.zeros(25))
    assert np.all(np.diff(lat_r) >= 0)
    share = np.divide(served_r, req_r, out=np.ones_like(req_r), where=req_r > 0)
    assert np.all(np.diff(share) <= 1e-12)
    # Past the SLA nothing is served.
    assert _lat([0.95], [0.0], sla=100.0)[2][0] == 0.0
