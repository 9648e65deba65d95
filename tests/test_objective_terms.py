"""The objective's terms computed by hand from their documented definitions, and evaluate() /
marginal() checked against them and against each other (edge cases and random states).

Units: cpu millicores, memory MiB, GPU milli (a card = 1000); prices per core, GiB, card or unit
per hour; carbon = power (W) x PUE x intensity (gCO2/kWh) / 1000 in gCO2/h; power =
idle + (peak - idle) x CPU requests / CPU capacity on every powered-on node.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from iro_fed import ClusterState, evaluate, marginal, problem_from_dict
from iro_fed.feasibility import feasible_nodes
from iro_fed.model import Weights
from iro_fed.testing import random_problem, random_problem_doc

EXACT = {"rel": 1e-12, "abs": 1e-12}
ONLY = {k: 0.0 for k in ("utilization", "latency", "cost", "carbon", "unplaced")}


def only(**weights: float) -> dict[str, float]:
    """Weights that isolate some terms (the others weigh 0)."""
    return {**ONLY, **weights}


def score_change(problem, state: ClusterState, w: int, n: int) -> float:
    after = state.assignment.copy()
    after[w] = n
    return evaluate(problem, after).score - evaluate(problem, state.assignment).score


# --- utilization -------------------------------------------------------------------------


def utilization_doc():
    return {
        "domains": [{"name": "az"}],
        "nodes": [
            # on from the start: card 1 is half used
            {"name": "g0", "domain": "az", "capacity": {"cpu": 8000, "memory": 16384}, "gpus": 2, "gpu_model": "T4",
             "gpu_free_milli": [1000, 500]},
            # on from the start: pre-allocated CPU
            {"name": "c1", "domain": "az", "capacity": {"cpu": 4000, "memory": 8192}, "allocated": {"cpu": 1000}},
            # off until a pod lands on it
            {"name": "c2", "domain": "az", "capacity": {"cpu": 4000, "memory": 8192}},
        ],
        "workloads": [
            {"name": "p0", "requests": {"cpu": 2000, "memory": 4096}, "gpu": {"count": 1, "milli": 250}},
            {"name": "p1", "requests": {"cpu": 1000, "memory": 2048}},
            {"name": "p2", "requests": {"cpu": 500}},
        ],
    }


def test_utilization_over_powered_on_nodes_with_gpu_column():
    problem = problem_from_dict(utilization_doc())
    b = evaluate(problem, np.array([0, 1, -1]))
    # On: g0 and c1. cpu (2000 + 1000 + 1000) / 12000, memory 6144 / 24576, gpu (500 + 250) / 2000.
    u = (1 / 3 + 1 / 4 + 3 / 8) / 3  # = 23/72
    assert b.terms["utilization"] == pytest.approx(23 / 72, **EXACT)
    assert b.utilization_pct == pytest.approx(100 * u, **EXACT)
    assert b.powered_on_nodes == 2 and b.placed == 2 and b.unplaced == 1
    assert b.terms["unplaced"] == pytest.approx(1 / 3, **EXACT)
    assert b.terms["cost"] == b.terms["carbon"] == b.terms["latency"] == 0.0  # no prices, no intensity, no regions
    assert b.cost_per_hour == 0.0 and b.carbon_g_per_hour == 0.0 and b.mean_latency_ms is None
    assert b.score == pytest.approx(23 / 72 - 10 / 3, **EXACT)

    # p2 powers c2 on: its capacity joins the denominators.
    b = evaluate(problem, np.array([0, 1, 2]))
    assert b.powered_on_nodes == 3
    assert b.terms["utilization"] == pytest.approx((4500 / 16000 + 6144 / 32768 + 750 / 2000) / 3, **EXACT)
    assert b.score == pytest.approx((4500 / 16000 + 6144 / 32768 + 750 / 2000) / 3, **EXACT)

    # Nothing placed: the pre-existing load alone (g0's half card, c1's CPU).
    b = evaluate(problem, np.array([-1, -1, -1]))
    assert b.powered_on_nodes == 2
    assert b.terms["utilization"] == pytest.approx((1000 / 12000 + 0 / 24576 + 500 / 2000) / 3, **EXACT)


def test_gpu_column_left_out_while_no_gpu_node_is_on():
    doc = utilization_doc()
    doc["nodes"][0]["gpu_free_milli"] = [1000, 1000]  # g0 idle, so off
    problem = problem_from_dict(doc)
    b = evaluate(problem, np.array([-1, 2, -1]))
    # On: c1 (allocated) and c2 (p1). The cluster has GPUs, but no powered-on node has any:
    # utilization averages cpu and memory only.
    assert b.terms["utilization"] == pytest.approx((2000 / 8000 + 2048 / 16384) / 2, **EXACT)


# --- latency -----------------------------------------------------------------------------


def latency_doc():
    return {
        "domains": [{"name": "edge"}, {"name": "az"}, {"name": "cloud"}],
        "latency_ms": {"users-a": {"edge": 5.0, "az": 15.0}, "users-b": {"edge": 30.0}},  # cloud unknown
        "latency_ref_ms": 5.0,
        "nodes": [{"name": f"{d}0", "domain": d, "capacity": {"cpu": 4000, "memory": 4096}} for d in ("edge", "az", "cloud")],
        "workloads": [
            {"name": "p0", "requests": {"cpu": 100}, "user_region": "users-a"},
            {"name": "p1", "requests": {"cpu": 100}, "user_region": "users-a"},
            {"name": "p2", "requests": {"cpu": 100}, "user_region": "users-a"},
            {"name": "p3", "requests": {"cpu": 100}, "user_region": "users-b"},
            {"name": "p4", "requests": {"cpu": 100}},
        ],
        "weights": only(latency=2.0),
    }


def test_latency_term_and_mean_latency():
    problem = problem_from_dict(latency_doc())
    # p0 on edge: 5/(5+5) = 0.5; p1 on az: 5/(5+15) = 0.25; p2 on cloud: unknown, adds 0;
    # p3 unplaced adds 0 but counts (it has a user region); p4 has none and does not count.
    b = evaluate(problem, np.array([0, 1, 2, -1, 0]))
    assert b.terms["latency"] == pytest.approx((0.5 + 0.25 + 0.0) / 4, **EXACT)
    assert b.mean_latency_ms == pytest.approx((5.0 + 15.0) / 2, **EXACT)  # known latencies of placed pods
    assert b.score == pytest.approx(2.0 * 0.1875, **EXACT)
    # Only unknown latencies: no mean, term 0.
    b = evaluate(problem, np.array([2, -1, -1, -1, 0]))
    assert b.mean_latency_ms is None and b.terms["latency"] == 0.0 and b.score == 0.0
    # Zero latency stays finite: ref / (ref + 0) = 1.
    doc = latency_doc()
    doc["latency_ms"]["users-a"]["edge"] = 0.0
    b = evaluate(problem_from_dict(doc), np.array([0, -1, -1, -1, -1]))
    assert b.terms["latency"] == pytest.approx(1 / 4, **EXACT) and b.mean_latency_ms == 0.0


# --- cost --------------------------------------------------------------------------------


def cost_doc():
    return {
        "resources": ["cpu", "memory", "ephemeral-storage"],
        "domains": [
            {"name": "az", "price_per_hour": {"cpu": 0.04, "memory": 0.005, "gpu": 2.5, "ephemeral-storage": 0.001}},
            {"name": "edge", "price_per_hour": {"cpu": 0.1}},
        ],
        "nodes": [
            {"name": "a0", "domain": "az", "capacity": {"cpu": 8000, "memory": 16384, "ephemeral-storage": 100},
             "gpus": 2, "gpu_model": "T4"},
            {"name": "e0", "domain": "edge", "capacity": {"cpu": 2000, "memory": 4096, "ephemeral-storage": 10}},
            {"name": "a1", "domain": "az", "capacity": {"cpu": 4000, "memory": 8192, "ephemeral-storage": 50}},
        ],
        "workloads": [{"name": "p0", "requests": {"cpu": 1000}}, {"name": "p1", "requests": {"cpu": 1000}}],
        "weights": only(cost=3.0),
    }


def test_cost_per_core_gib_card_and_unit():
    problem = problem_from_dict(cost_doc())
    a0 = 8 * 0.04 + 16 * 0.005 + 100 * 0.001 + 2 * 2.5  # 5.5 per hour
    e0 = 2 * 0.1  # memory and storage are free on the edge
    a1 = 4 * 0.04 + 8 * 0.005 + 50 * 0.001  # 0.25
    total = a0 + e0 + a1
    b = evaluate(problem, np.array([1, -1]))
    assert b.cost_per_hour == pytest.approx(e0, **EXACT)
    assert b.terms["cost"] == pytest.approx(e0 / total, **EXACT)
    assert b.score == pytest.approx(-3.0 * e0 / total, **EXACT)
    # A node costs its whole capacity once it is on, however little runs on it.
    b = evaluate(problem, np.array([1, 0]))
    assert b.cost_per_hour == pytest.approx(a0 + e0, **EXACT)
    b = evaluate(problem, np.array([1, 1]))
    assert b.cost_per_hour == pytest.approx(e0, **EXACT)


# --- carbon and power --------------------------------------------------------------------


def carbon_doc():
    return {
        "domains": [{"name": "az", "carbon_intensity": 300.0, "pue": 1.25}, {"name": "edge", "carbon_intensity": 50.0}],
        "nodes": [
            {"name": "a0", "domain": "az", "capacity": {"cpu": 4000, "memory": 8192}, "allocated": {"cpu": 1000},
             "power_idle_w": 100, "power_peak_w": 300},
            # default power model: 5 W per core at peak (+300 W per card), idle 40 % of peak
            {"name": "e0", "domain": "edge", "capacity": {"cpu": 2000, "memory": 4096}},
            {"name": "a1", "domain": "az", "capacity": {"cpu": 8000, "memory": 8192}, "gpus": 1, "gpu_model": "T4"},
        ],
        "workloads": [
            {"name": "p0", "requests": {"cpu": 2000}},
            {"name": "p1", "requests": {"cpu": 500}},
            {"name": "p2", "gpu": {"count": 1}},
        ],
        "weights": only(carbon=2.0),
    }


def test_carbon_from_power_model_pue_and_intensity():
    problem = problem_from_dict(carbon_doc())
    b = evaluate(problem, np.array([0, 1, -1]))
    p_a0 = 100 + (300 - 100) * (1000 + 2000) / 4000  # 250 W
    p_e0 = 4 + (10 - 4) * 500 / 2000  # 5.5 W
    assert b.power_w == pytest.approx(p_a0 + p_e0, **EXACT)
    carbon = p_a0 / 1000 * 1.25 * 300 + p_e0 / 1000 * 1.0 * 50  # 93.75 + 0.275 g/h
    assert b.carbon_g_per_hour == pytest.approx(carbon, **EXACT)
    at_peak = 300 / 1000 * 1.25 * 300 + 10 / 1000 * 50 + (5 * 8 + 300) / 1000 * 1.25 * 300  # every node at peak
    assert b.terms["carbon"] == pytest.approx(carbon / at_peak, **EXACT)
    assert b.score == pytest.approx(-2.0 * carbon / at_peak, **EXACT)
    # A GPU pod without CPU requests powers a1 on and draws its card's part of the dynamic range:
    # the default share 300 / (5 * 8 + 300) of 340 - 136 W at full GPU use, 136 + 180 = 316 W.
    b2 = evaluate(problem, np.array([0, 1, 2]))
    assert b2.carbon_g_per_hour == pytest.approx(carbon + (0.4 * 340 + 0.6 * 300) / 1000 * 1.25 * 300, **EXACT)


def test_unplaced_term_and_zero_weights():
    doc = carbon_doc()
    doc["weights"] = only(unplaced=4.0)
    problem = problem_from_dict(doc)
    assert evaluate(problem, np.array([0, -1, -1])).score == pytest.approx(-4.0 * 2 / 3, **EXACT)
    zero = problem.replace(weights=Weights(**ONLY))
    state = ClusterState(zero)
    for assignment in ([0, 1, 2], [-1, -1, -1], [0, -1, 2]):
        assert evaluate(zero, np.array(assignment)).score == 0.0
    assert marginal(zero, state, 0).tolist() == [0.0, 0.0, 0.0]
    # A zero penalty is written as 0.0, not -0.0.
    assert "-0.0" not in json.dumps(evaluate(problem, np.array([0, 1, 2])).to_dict())


# --- degenerate problems -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "workloads", "assignment", "score"),
    [
        ([], [], [], 0.0),  # nothing at all
        ([{"name": "n", "domain": "d", "capacity": {"cpu": 1000, "memory": 10}}], [], [], 0.0),  # no pods
        ([], [{"name": "p", "requests": {"cpu": 1}}], [-1], -10.0),  # no nodes: all unplaced
        ([{"name": "n", "domain": "d", "capacity": {"cpu": 1000, "memory": 10}, "power_idle_w": 0, "power_peak_w": 0}],
         [{"name": "p", "requests": {"cpu": 10}}], [0], (10 / 1000 + 0 / 10) / 2),  # no power, no prices
    ],
)
def test_degenerate_problems_stay_finite(nodes, workloads, assignment, score):
    problem = problem_from_dict({"domains": [{"name": "d"}], "nodes": nodes, "workloads": workloads})
    b = evaluate(problem, np.array(assignment, dtype=np.int64))
    assert b.score == pytest.approx(score, **EXACT)
    assert all(np.isfinite(v) and 0.0 <= v <= 1.0 for v in b.terms.values())
    assert b.mean_latency_ms is None
    state = ClusterState(problem)
    for w in range(problem.num_workloads):
        delta = marginal(problem, state, w)
        assert delta.shape == (problem.num_nodes,) and np.isfinite(delta).all()
        for n in range(problem.num_nodes):
            assert delta[n] == pytest.approx(score_change(problem, state, w, n), abs=1e-12)


def test_assignment_of_the_wrong_shape_or_range_is_refused():
    problem = problem_from_dict(utilization_doc())
    with pytest.raises(ValueError, match=r"assignment has shape \(2,\), expected \(3,\)"):
        evaluate(problem, np.array([0, 1]))  # used to score p2 as unplaced
    with pytest.raises(ValueError, match=r"assignment\[1\] \(p1\): node index 3 is not -1 \(unplaced\) or 0..2"):
        evaluate(problem, np.array([0, 3, -1]))
    with pytest.raises(ValueError, match=r"assignment\[2\] \(p2\): node index -2"):
        evaluate(problem, np.array([0, 1, -2]))


# --- marginal ----------------------------------------------------------------------------


def test_marginal_of_the_first_pod_on_an_empty_cluster_by_hand():
    doc = carbon_doc()
    doc["nodes"][0]["allocated"] = {}
    doc["weights"] = {"utilization": 1.0, "latency": 1.0, "cost": 1.0, "carbon": 1.0, "unplaced": 10.0}
    problem = problem_from_dict(doc)
    state = ClusterState(problem)
    assert not state.on.any()
    at_peak = 300 / 1000 * 1.25 * 300 + 10 / 1000 * 50 + 340 / 1000 * 1.25 * 300
    # p1 (500 m) on e0: utilization (500/2000 + 0/4096) / 2, carbon of e0 at 25 % CPU, one pod fewer unplaced.
    by_hand = (0.25 + 0) / 2 - (4 + 6 * 0.25) / 1000 * 50 / at_peak + 10 / 3
    assert marginal(problem, state, 1)[1] == pytest.approx(by_hand, **EXACT)
    assert marginal(problem, state, 1)[1] == pytest.approx(score_change(problem, state, 1, 1), **EXACT)


def test_marginal_after_a_nodes_last_pod_leaves():
    problem = problem_from_dict(carbon_doc())
    state = ClusterState(problem)
    state.place(1, 1)
    state.remove(1)  # e0 is empty again: off, and placing on it powers it on again
    assert state.on.tolist() == [True, False, False]
    for n in range(problem.num_nodes):
        assert marginal(problem, state, 1)[n] == pytest.approx(score_change(problem, state, 1, n), abs=1e-12)


def test_removing_float_requests_powers_the_node_off():
    # 0.1 + 0.2 - 0.1 - 0.2 leaves 2.8e-17 in allocated: the node must still count as off
    # (ClusterState kept it on, so marginal left out the cost of powering it on again).
    doc = {
        "domains": [{"name": "az", "carbon_intensity": 400.0, "price_per_hour": {"cpu": 0.04}}],
        "nodes": [{"name": f"n{i}", "domain": "az", "capacity": {"cpu": 4000, "memory": 8192},
                   "power_idle_w": 100, "power_peak_w": 300} for i in range(2)],
        "workloads": [{"name": "a", "requests": {"cpu": 0.1, "memory": 0.1}}, {"name": "b", "requests": {"cpu": 0.2, "memory": 0.2}}],
    }
    problem = problem_from_dict(doc)
    state = ClusterState(problem)
    state.place(0, 0)
    state.place(1, 0)
    state.remove(0)
    state.remove(1)
    fresh = ClusterState(problem)
    assert state.on.tolist() == fresh.on.tolist() == [False, False]
    assert state.util_cap_on.tolist() == fresh.util_cap_on.tolist()
    assert state.allocated.tolist() == fresh.allocated.tolist() and state.free.tolist() == fresh.free.tolist()
    assert state.free_share.tolist() == fresh.free_share.tolist()
    delta = marginal(problem, state, 0)
    assert delta[0] == pytest.approx(delta[1], abs=1e-12)  # both nodes are off and alike
    assert delta[0] == pytest.approx(score_change(problem, state, 0, 0), abs=1e-12)


def _random_weights(rng: np.random.Generator) -> Weights:
    return Weights(*(float(x) for x in rng.choice([0.0, 0.0, 0.5, 1.0, 3.0], 5)))


@pytest.mark.parametrize("seed", range(40))
def test_marginal_equals_change_of_evaluate_over_random_walks(seed):
    """Random problems (GPU shares and multi-GPU pods, pre-allocated load, pods with and without
    user regions, zero weights) walked by random placements and removals: at every state the
    marginal of every unplaced pod on every feasible node is the change of evaluate()."""
    rng = np.random.default_rng(1000 + seed)
    problem = random_problem(seed, nodes=int(rng.integers(1, 7)), pods=int(rng.integers(1, 9)),
                             gpus=seed % 5 != 0, constraints=seed % 2 == 0)
    if seed % 3 == 0:
        problem = problem.replace(weights=_random_weights(rng))
    state = ClusterState(problem)
    checked = 0
    for _ in range(25):
        w = int(rng.integers(problem.num_workloads))
        if state.assignment[w] >= 0:
            state.remove(w)
            continue
        nodes = np.flatnonzero(feasible_nodes(state, w))
        if nodes.size == 0:
            continue
        before = evaluate(problem, state.assignment).score
        full = marginal(problem, state, w)
        subset = marginal(problem, state, w, nodes)
        assert subset == pytest.approx(full[nodes], abs=1e-12)
        for n, delta in zip(nodes, subset, strict=True):
            after = state.assignment.copy()
            after[w] = n
            assert evaluate(problem, after).score - before == pytest.approx(delta, abs=1e-9)
            checked += 1
        state.place(w, int(rng.choice(nodes)))
    # The walk's state agrees with a state built from scratch for the same placement.
    fresh = ClusterState(problem)
    for w in np.flatnonzero(state.assignment >= 0):
        fresh.place(int(w), int(state.assignment[w]), state.gpu_cards.get(int(w)))
    assert state.on.tolist() == fresh.on.tolist()
    assert state.util_cap_on == pytest.approx(fresh.util_cap_on)
    assert checked > 0 or problem.num_workloads == 0 or not feasible_nodes(ClusterState(problem), 0).any()


@pytest.mark.parametrize("seed", range(25))
def test_score_finite_and_terms_normalized_at_the_limits(seed):
    """Numbers at the loader's bounds (0, 1e-6, 1e10) everywhere: R and the marginal stay finite,
    every term in [0, 1], and the marginal still agrees with evaluate (relative to R's size)."""
    rng = np.random.default_rng(seed)
    doc = random_problem_doc(seed, nodes=4, pods=5)
    big, small = 1e10, 1e-6

    def pick() -> float:
        return float(rng.choice([0.0, small, 1.0, big]))

    for d in doc["domains"]:
        d.update(carbon_intensity=pick(), pue=float(rng.choice([1.0, big])),
                 price_per_hour={k: pick() for k in d["price_per_hour"]})
    for n in doc["nodes"]:
        n["capacity"] = {k: float(rng.choice([small, 1.0, big])) for k in n["capacity"]}
        n["allocated"] = {k: min(v, float(rng.choice([0.0, small, 1.0, big]))) for k, v in n["capacity"].items()}
        peak = pick()
        n.update(power_peak_w=peak, power_idle_w=peak * float(rng.choice([0.0, 0.5, 1.0])))
    for w in doc["workloads"]:
        w["requests"] = {k: float(rng.choice([0.0, small, 1.0, big])) for k in w["requests"]}
    doc["weights"] = {k: pick() for k in ("utilization", "latency", "cost", "carbon", "unplaced")}
    doc["latency_ms"] = {r: {d: pick() for d in row} for r, row in doc["latency_ms"].items()}
    doc["latency_ref_ms"] = float(rng.choice([small, 10.0, big]))
    problem = problem_from_dict(doc)
    state = ClusterState(problem)
    for w in range(problem.num_workloads + 1):
        b = evaluate(problem, state.assignment)
        assert np.isfinite(b.score) and np.isfinite([b.cost_per_hour, b.carbon_g_per_hour, b.power_w, b.utilization_pct]).all()
        assert all(0.0 <= v <= 1.0 + 1e-12 for v in b.terms.values()), b.terms
        if w == problem.num_workloads:
            break
        nodes = np.flatnonzero(feasible_nodes(state, w))
        if nodes.size == 0:
            continue
        deltas = marginal(problem, state, w, nodes)
        assert np.isfinite(deltas).all()
        scale = max(1.0, abs(b.score), *(abs(v) for v in b.weighted.values()))
        for n, delta in zip(nodes, deltas, strict=True):
            assert score_change(problem, state, w, int(n)) == pytest.approx(delta, abs=1e-9 * scale)
        state.place(w, int(rng.choice(nodes)))
