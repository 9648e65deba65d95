"""Regressions from a randomized stress run of every solver on problems unlike the shipped ones.

Large fractional amounts: a node's total, summed in another order than the pods were placed,
differs from what the filters saw by float rounding, well above the absolute EPS at 1e8 units.
"""

from __future__ import annotations

import pytest

import solvers
from iro_fed import problem_from_dict
from iro_fed.feasibility import check_placement

# Nine pods with two decimals that fill a 1e8-millicore node (the last is what the others leave).
FILLED_NODE = {
    "resources": ["cpu"],
    "domains": [{"name": "d"}],
    "nodes": [{"name": "n", "domain": "d", "capacity": {"cpu": 100000000.0}}],
    "workloads": [
        {"name": f"p{i}", "requests": {"cpu": cpu}}
        for i, cpu in enumerate([10096120.63, 11527629.04, 14375962.17, 2176004.26, 31633536.62, 1154246.43,
                                 8488938.81, 4534560.39, 16013001.650000006])
    ],
}


def test_a_node_filled_pod_by_pod_is_not_over_capacity():
    problem = problem_from_dict(FILLED_NODE)
    placement = solvers.make("first-fit").solve(problem)
    assert placement.num_placed == 9  # every pod fitted when the filter checked it
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []


def test_composites_keep_a_valid_placement_of_large_fractional_amounts():
    problem = problem_from_dict(FILLED_NODE)
    # fallback threw first-fit's placement away as "cpu over capacity (100000000 > 100000000)"
    fb = solvers.make("fallback", primary="first-fit").solve(problem)
    assert fb.info["solved_by"] == "first-fit" and fb.info["fallback_reason"] is None
    # time-budget called it infeasible
    tb = solvers.make("time-budget", solver="first-fit").solve(problem)
    assert tb.status == "feasible" and "violations" not in tb.info


@pytest.mark.parametrize("excess", [1.0, 0.01])
def test_a_real_overcommit_of_a_large_node_is_still_flagged(excess):
    doc = {**FILLED_NODE, "workloads": [{"name": "a", "requests": {"cpu": 60000000.0}},
                                        {"name": "b", "requests": {"cpu": 40000000.0 + excess}}]}
    problem = problem_from_dict(doc)
    errors = check_placement(problem, [0, 0], {})
    assert errors == [f"node n: cpu over capacity ({100000000 + excess:.12g} > 100000000)"]


def test_a_what_if_cannot_give_a_node_cards_it_does_not_have():
    """ClusterState.set_node_usage took a padded row with 1000 past the node's cards: best-fit's
    decide then chose those phantom cards and place() refused them ("cards [2, 3] are not
    distinct card indices of node 'small' (0..1)")."""
    import numpy as np

    from iro_fed.model import ClusterState

    doc = {"domains": [{"name": "d"}],
           "nodes": [{"name": "big", "domain": "d", "capacity": {"cpu": 1000, "memory": 1000}, "gpus": 4,
                      "gpu_free_milli": [0, 0, 0, 0]},
                     {"name": "small", "domain": "d", "capacity": {"cpu": 1000, "memory": 1000}, "gpus": 2}],
           "workloads": [{"name": "p", "requests": {"cpu": 1}, "gpu": {"count": 2}}]}
    problem = problem_from_dict(doc)
    state = ClusterState(problem)
    with pytest.raises(ValueError, match=r"gpu_free of node 'small' must give 0\.\.1000 for each of its 2 card\(s\) "
                                         r"and -1 past them, got \[0, 0, 1000, 1000\]"):
        state.set_node_usage(1, problem.allocated[1], np.array([0, 0, 1000, 1000]))
    with pytest.raises(ValueError, match="must give 0..1000 for each of its 2 card"):
        state.set_node_usage(1, problem.allocated[1], np.array([-1, 1000]))  # would hide a card it has
    # the state is untouched, and a proper padded row still works
    assert state.gpu_free[1].tolist() == [1000, 1000, -1, -1] and state.journal == []
    state.set_node_usage(1, problem.allocated[1], np.array([0, 1000, -1, -1]))
    decision = solvers.make("best-fit").decide(state, 0)
    assert decision.node == -1 and "Insufficient nvidia.com/gpu" in decision.reason


@pytest.mark.parametrize("solver", ["cpsat", "qubo"])
def test_a_pod_that_does_not_fit_back_where_it_was_is_weighed_there_too(solver):
    """The polish takes a pod off its node and weighs every node it fits; rounding can leave it
    just outside its own node's room (a 1e-9 pod on 1e-6 nodes), and the polish indexed the
    candidates as if it were there: IndexError (iro solve exited 1), or another node's gain."""
    pytest.importorskip("ortools" if solver == "cpsat" else "dimod")
    doc = {"domains": [{"name": "d0"}, {"name": "d1"}],
           "nodes": [{"name": "n1", "domain": "d1", "capacity": {"cpu": 1e-06, "memory": 2e-06}},
                     {"name": "n2", "domain": "d0", "capacity": {"cpu": 1.5e-06, "memory": 1e-06}}],
           "workloads": [{"name": "p0", "requests": {"memory": 1e-06}}, {"name": "p1", "requests": {"memory": 1e-09}}]}
    problem = problem_from_dict(doc)
    placement = solvers.make(solver, seed=0).solve(problem)
    assert not check_placement(problem, placement.assignment, placement.gpu_cards)
    assert (placement.assignment >= 0).all()


def test_qubo_makes_no_capacity_constraint_over_no_pods():
    """A node whose free memory rounded to just below -EPS, with no candidate asking for memory,
    got a constraint over no pods: its unit the mean of an empty array, NaN penalties in two
    sub-QUBOs and a refinement that accepted none of its steps."""
    pytest.importorskip("dimod")
    import warnings

    from tests.solvers.fuzz_problems import brim

    problem = problem_from_dict(brim(73))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "Mean of empty slice", "invalid value ..."
        placement = solvers.make("qubo", seed=0, num_reads=2, num_sweeps=50, refine_steps=10).solve(problem)
    assert not check_placement(problem, placement.assignment, placement.gpu_cards)
