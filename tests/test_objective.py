"""The objective: hand-computed terms, and the marginal agreeing with evaluate."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed import ClusterState, evaluate, marginal, problem_from_dict
from iro_fed.feasibility import feasible_nodes
from iro_fed.testing import random_problem


def two_node_doc():
    return {
        "domains": [{"name": "az", "carbon_intensity": 400.0, "pue": 1.5, "price_per_hour": {"cpu": 0.04, "memory": 0.005}}],
        "latency_ms": {"users": {"az": 10.0}},
        "nodes": [
            {"name": f"n{i}", "domain": "az", "capacity": {"cpu": 4000, "memory": 8192}, "power_idle_w": 100, "power_peak_w": 300}
            for i in range(2)
        ],
        "workloads": [{"name": "p", "requests": {"cpu": 2000, "memory": 2048}, "user_region": "users"}],
    }


def test_terms_by_hand():
    problem = problem_from_dict(two_node_doc())
    b = evaluate(problem, np.array([0]))
    assert b.utilization_pct == pytest.approx(37.5)  # mean(2000/4000, 2048/8192) on the one node that is on
    assert b.mean_latency_ms == pytest.approx(10.0)
    assert b.terms["latency"] == pytest.approx(0.5)  # ref 10 / (10 + 10)
    assert b.cost_per_hour == pytest.approx(0.2)  # 4 cores * 0.04 + 8 GiB * 0.005
    assert b.terms["cost"] == pytest.approx(0.5)  # of 0.4 with both nodes on
    assert b.power_w == pytest.approx(200.0)  # 100 + (300 - 100) * 0.5
    assert b.carbon_g_per_hour == pytest.approx(120.0)  # 0.2 kW * 1.5 PUE * 400 g/kWh
    assert b.terms["carbon"] == pytest.approx(120.0 / 360.0)
    assert b.powered_on_nodes == 1 and b.unplaced == 0
    assert b.score == pytest.approx(0.375 + 0.5 - 0.5 - 1 / 3)


def test_unplaced_only():
    problem = problem_from_dict(two_node_doc())
    b = evaluate(problem, np.array([-1]))
    assert b.terms == {"utilization": 0.0, "latency": 0.0, "cost": 0.0, "carbon": 0.0, "unplaced": 1.0}
    assert b.score == pytest.approx(-10.0)
    assert b.mean_latency_ms is None


def test_weights_scale_terms():
    doc = two_node_doc()
    doc["weights"] = {"utilization": 2.0, "latency": 0.0, "cost": 3.0, "carbon": 0.5, "unplaced": 1.0}
    b = evaluate(problem_from_dict(doc), np.array([1]))
    assert b.score == pytest.approx(2 * 0.375 - 3 * 0.5 - 0.5 / 3)


def test_existing_usage_counts_as_powered_on():
    doc = two_node_doc()
    doc["nodes"][1]["allocated"] = {"cpu": 1000, "memory": 0}
    problem = problem_from_dict(doc)
    b = evaluate(problem, np.array([-1]))
    assert b.powered_on_nodes == 1
    assert b.utilization_pct == pytest.approx(100 * np.mean([1000 / 4000, 0.0]))


@pytest.mark.parametrize("seed", range(12))
def test_marginal_equals_change_of_evaluate(seed):
    problem = random_problem(seed, nodes=8, pods=10)
    state = ClusterState(problem)
    rng = np.random.default_rng(seed)
    for w in range(problem.num_workloads):
        nodes = np.flatnonzero(feasible_nodes(state, w))
        if nodes.size == 0:
            continue
        before = evaluate(problem, state.assignment).score
        deltas = marginal(problem, state, w, nodes)
        for n, delta in zip(nodes, deltas, strict=True):
            after = state.assignment.copy()
            after[w] = n
            assert evaluate(problem, after).score - before == pytest.approx(delta, abs=1e-9)
        state.place(w, int(rng.choice(nodes)))


def test_terms_are_normalized():
    for seed in range(10):
        problem = random_problem(seed, nodes=6, pods=8)
        assignment = np.full(problem.num_workloads, -1)
        state = ClusterState(problem)
        for w in range(problem.num_workloads):
            nodes = np.flatnonzero(feasible_nodes(state, w))
            if nodes.size:
                state.place(w, int(nodes[0]))
        assignment = state.assignment
        for value in evaluate(problem, assignment).terms.values():
            assert 0.0 <= value <= 1.0


def test_problem_views_share_the_cluster():
    problem = random_problem(3, nodes=5, pods=6)
    sub = problem.with_workloads([4, 1])
    assert [w.name for w in sub.workloads] == ["p4", "p1"]
    assert (sub.demand == problem.demand[[4, 1]]).all() and (sub.capacity == problem.capacity).all()
    state = ClusterState(problem)
    state.place(0, int(np.flatnonzero(feasible_nodes(state, 0))[0]))
    moved = problem.with_cluster(state.allocated, state.gpu_free)
    assert (moved.allocated == state.allocated).all() and moved.workloads == problem.workloads
    with pytest.raises(TypeError, match="unknown field"):
        problem.replace(colour="red")
