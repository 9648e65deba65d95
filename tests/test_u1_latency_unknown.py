"""The objective counts placed pods whose latency is unknown, next to the mean it leaves them out of."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import solvers
from iro_fed import evaluate, problem_from_dict
from iro_fed.placement import write_placement
from iro_fed.problem_io import load_problem

BANK = Path(__file__).resolve().parents[1] / "examples" / "problems" / "bank-three-zone.json"


def gap_doc() -> dict:
    # users-us has no latency to edge-1: a pod of users-us placed there is unknown.
    return {
        "domains": [{"name": "edge-1"}, {"name": "zone-a"}],
        "latency_ms": {"users-us": {"zone-a": 3.0}, "users-eu": {"edge-1": 4.0, "zone-a": 8.0}},
        "nodes": [
            {"name": "e0", "domain": "edge-1", "capacity": {"cpu": 4000, "memory": 4096}},
            {"name": "z0", "domain": "zone-a", "capacity": {"cpu": 4000, "memory": 4096}},
        ],
        "workloads": [
            {"name": "a", "requests": {"cpu": 100}, "user_region": "users-us"},
            {"name": "b", "requests": {"cpu": 100}, "user_region": "users-us"},
            {"name": "c", "requests": {"cpu": 100}, "user_region": "users-us"},
            {"name": "d", "requests": {"cpu": 100}},
        ],
    }


def test_pod_on_a_domain_without_latency_is_counted_and_left_out_of_the_mean() -> None:
    problem = problem_from_dict(gap_doc())
    # a on edge-1 (unknown), b on zone-a (3 ms), c unplaced, d (no region) on edge-1.
    b = evaluate(problem, np.array([0, 1, -1, 0]))
    assert b.latency_unknown == 1
    assert b.mean_latency_ms == pytest.approx(3.0)
    d = b.to_dict()
    assert d["latency_unknown"] == 1 and isinstance(d["latency_unknown"], int)
    assert d["mean_latency_ms"] == 3.0
    # L unchanged: only b adds 10 / (10 + 3), over the 3 pods with a user region.
    assert b.terms["latency"] == pytest.approx((10 / 13) / 3, rel=1e-12)


def test_only_unknown_latencies_count_and_give_no_mean() -> None:
    problem = problem_from_dict(gap_doc())
    b = evaluate(problem, np.array([0, 0, 0, 1]))
    assert b.latency_unknown == 3 and b.mean_latency_ms is None and b.terms["latency"] == 0.0
    # Unplaced pods and pods without a user region are not "unknown".
    b = evaluate(problem, np.array([-1, -1, -1, 0]))
    assert b.latency_unknown == 0 and b.mean_latency_ms is None


def test_all_latencies_known_reports_zero_in_the_placement_file(tmp_path: Path) -> None:
    problem = load_problem(BANK)
    placement = solvers.make("best-fit").solve(problem)
    assert placement.objective is not None and placement.objective.placed > 0
    assert placement.objective.latency_unknown == 0
    out = tmp_path / "placement.json"
    write_placement(placement, problem, out)
    obj = json.loads(out.read_text())["objective"]
    assert obj["latency_unknown"] == 0
    assert obj["mean_latency_ms"] is not None
