"""A run without requests or without online pods reports no success rate / online pending share
(None, JSON null, "-" in the table), not a perfect 100 % / 0 %."""

from __future__ import annotations

import json

import numpy as np
import pytest

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.metrics import pending_stats, success_pct
from iro_fed.sim.model import PodSpec, Service

from .helpers import tiny_scenario, totals_table_rows


def test_success_pct_without_requests_is_none():
    assert success_pct(0.0, 0.0) is None  # was 100.0
    assert success_pct(0.0, 10.0) == 100.0 and success_pct(5.0, 10.0) == 50.0


def test_pending_at_peak_without_pods_ready_at_peak_is_none():
    ready = np.array([0, 1, -1])
    s = pending_stats(ready, np.array([0, 3, -1]), np.zeros(3, dtype=bool), step_min=1.0, until=10)
    assert s["pending_at_peak_pct"] is None and s["peak_ready_pods"] == 0  # was 0.0
    assert s["pending_pct"] == pytest.approx(50.0)


def test_a_run_without_services_reports_no_success_rate_and_no_online_pending():
    # Only batch pods, as openb and promo-surge's job stream: no request was ever made.
    pods = [PodSpec(f"b{i}", "batch", 1000, 1024, i, duration=3) for i in range(15)]
    sc = tiny_scenario(steps=20, pods=pods, own_nodes=1, cloud_nodes=0)
    r = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False)).run()
    t = r.totals
    assert t["requests"] == 0.0
    assert t["success_rate_pct"] is None  # was 100.0
    assert t["p99_latency_ms"] is None
    assert t["pending_at_peak_online_pct"] is None  # was 0.0 with no online pod at all
    assert t["pending_at_peak_pct"] is not None  # batch pods became ready in the peak window (10, 20)
    doc = json.loads(json.dumps(r.report()))
    assert doc["success_rate_pct"] is None and doc["pending_at_peak_online_pct"] is None
    assert set(doc["series"]["success_rate_pct"]) == {None}
    rows = totals_table_rows(t)
    assert rows["request success %"] == "-"  # was 100.0000
    assert rows["P99 latency ms"] == "-"


def test_a_step_without_requests_has_no_success_value_in_the_series():
    # One replica; traffic only in steps 2 and 3. The quiet steps served nothing: a gap (None),
    # not 100 %, while the run's total covers the steps with requests only.
    steps = 5
    traffic = np.array([0.0, 0.0, 1.0, 1.0, 0.0])
    svc = Service(
        "s", "users", 100, 128, mu=10.0, service_ms=1.0, sla_ms=1000.0, traffic=traffic, min_replicas=1, max_replicas=1
    )
    sc = tiny_scenario(steps=steps, services=[svc], own_nodes=1, cloud_nodes=0)
    r = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False)).run()
    series = r.series["success_rate_pct"]
    assert series[0] is None and series[1] is None and series[4] is None  # were 100.0
    assert series[2] == 100.0 and series[3] == 100.0
    assert r.totals["success_rate_pct"] == 100.0
