"""A run in which no pod became ready reports no pending share (None, JSON null, "-" in the
table), not 0 %: as success % without requests, a metric without a denominator is null."""

from __future__ import annotations

import json

import numpy as np
import pytest

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.metrics import pending_stats
from iro_fed.sim.model import PodSpec

from .sim.helpers import tiny_scenario, totals_table_rows


def test_pending_pct_without_a_ready_pod_is_none() -> None:
    s = pending_stats(np.array([-1, -1]), np.array([-1, -1]), np.zeros(2, dtype=bool), step_min=1.0, until=10)
    assert s["ready_pods"] == 0
    assert s["pending_pct"] is None  # was 0.0: read as "nothing waited" beside a run that placed nothing


def test_pending_pct_with_ready_pods_is_unchanged() -> None:
    s = pending_stats(np.array([0, 2]), np.array([0, -1]), np.zeros(2, dtype=bool), step_min=1.0, until=10)
    assert s["pending_pct"] == pytest.approx(50.0)
    none_waited = pending_stats(np.array([0, 2]), np.array([0, 2]), np.zeros(2, dtype=bool), step_min=1.0, until=10)
    assert none_waited["pending_pct"] == 0.0  # a real 0: pods became ready, none waited


@pytest.mark.parametrize("arrival", [None, 50])  # no pod at all; one arriving after the run ends
def test_a_run_where_no_pod_became_ready_reports_null(arrival: int | None) -> None:
    pods = [] if arrival is None else [PodSpec("late", "batch", 1000, 1024, arrival, duration=3)]
    sc = tiny_scenario(steps=20, pods=pods, own_nodes=1, cloud_nodes=0)
    r = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False)).run()
    assert r.totals["pending_pct"] is None
    doc = json.loads(json.dumps(r.report(), allow_nan=False))
    assert doc["pending_pct"] is None
    assert totals_table_rows(r.totals)["pending % of ready pods"] == "-"
