"""The conformance suite, applied to every registered solver whose dependency is installed."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed import problem_from_dict
from iro_fed.feasibility import feasible_nodes
from iro_fed.model import ClusterState
from iro_fed.objective import evaluate
from iro_fed.testing import brute_force, conformance_failures, random_problem, random_problem_doc

SOLVERS = solvers.available()


@pytest.fixture(scope="module")
def tiny_cases():
    """Random tiny problems with their brute-force optimum."""
    cases = []
    for seed in range(8):
        problem = random_problem(seed, nodes=3, pods=4)
        cases.append((problem, brute_force(problem).objective.score))
    return cases


@pytest.mark.parametrize("name", SOLVERS)
def test_conformance_on_random_tiny_problems(name, tiny_cases):
    for problem, optimum in tiny_cases:
        assert conformance_failures(name, problem, optimum=optimum, seed=3) == []


@pytest.mark.parametrize("name", SOLVERS)
def test_conformance_on_larger_problems(name):
    for seed in range(3):
        problem = random_problem(100 + seed, nodes=25, pods=60)
        assert conformance_failures(name, problem, seed=seed) == []


@pytest.mark.parametrize("name", SOLVERS)
def test_empty_problem(name):
    doc = random_problem_doc(1, nodes=3, pods=0)
    placement = solvers.make(name).solve(problem_from_dict(doc))
    assert placement.assignment.shape == (0,)
    assert placement.objective.unplaced == 0


@pytest.mark.parametrize("name", SOLVERS)
def test_no_nodes(name):
    doc = random_problem_doc(2, nodes=0, pods=2)
    problem = problem_from_dict(doc)
    placement = solvers.make(name).solve(problem)
    assert (placement.assignment == -1).all()
    assert placement.reasons == {0: "0/0 nodes are available.", 1: "0/0 nodes are available."}


@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize("nodes, pods", [(3, 0), (0, 2), (4, 1), (4, 6)], ids=["no-pods", "no-nodes", "one-pod", "six-pods"])
def test_describe_is_none_or_one_line_named_after_the_solver(name, nodes, pods):
    solver = solvers.make(name)
    line = solver.describe(solver.solve(problem_from_dict(random_problem_doc(5, nodes=nodes, pods=pods))))
    assert line is None or (line.startswith(f"{name}: ") and "\n" not in line)


@pytest.mark.parametrize("name", SOLVERS)
def test_one_pod_is_placed_where_it_fits(name):
    doc = random_problem_doc(3, nodes=4, pods=1, gpus=False, constraints=False)
    doc["workloads"][0]["requests"] = {"cpu": 100, "memory": 64}
    placement = solvers.make(name).solve(problem_from_dict(doc))
    assert placement.assignment[0] >= 0 and placement.reasons == {}


@pytest.mark.parametrize("name", SOLVERS)
def test_pod_that_fits_nowhere_is_unplaced_with_reason(name):
    doc = random_problem_doc(4, nodes=4, pods=2, gpus=False, constraints=False)
    doc["workloads"][1]["requests"] = {"cpu": 10**7, "memory": 64}
    placement = solvers.make(name).solve(problem_from_dict(doc))
    assert placement.assignment[1] == -1
    assert placement.reasons[1] == "0/4 nodes are available: 4 Insufficient cpu."


@pytest.mark.parametrize("name", SOLVERS)
def test_capacity_holds_when_pods_compete(name):
    # Three pods of 6 cores, two nodes of 8 cores: at most one pod per node.
    doc = {
        "domains": [{"name": "az", "price_per_hour": {"cpu": 0.03}}],
        "nodes": [{"name": f"n{i}", "domain": "az", "capacity": {"cpu": 8000, "memory": 8192}} for i in range(2)],
        "workloads": [{"name": f"p{j}", "requests": {"cpu": 6000, "memory": 1024}} for j in range(3)],
    }
    placement = solvers.make(name).solve(problem_from_dict(doc))
    assert placement.num_placed == 2
    assert sorted(placement.assignment[placement.assignment >= 0].tolist()) == [0, 1]


def test_greedy_objective_is_optimal_for_one_pod():
    # With one pod the marginal's argmax is the optimum: greedy must equal brute force, except
    # where the GPU-stranding guard ranks nodes last (a CPU pod alone: each card is taken to need
    # its share of the node's CPU and memory); then it is the best of the nodes the guard keeps.
    guarded = []  # seeds where the guard moved the pod off the optimum
    for seed in range(20):
        problem = random_problem(seed, nodes=5, pods=1)
        solver = solvers.make("greedy-objective")
        greedy = solver.solve(problem).objective.score
        state = ClusterState(problem)
        cand = np.flatnonzero(feasible_nodes(state, 0))
        strands = solver.strands(state, 0, cand) if cand.size else None
        if strands is None:
            assert np.isclose(greedy, brute_force(problem).objective.score, atol=1e-12), seed
            continue
        kept = [evaluate(problem, np.array([n])).score for n in cand[~strands]]
        assert np.isclose(greedy, max(kept), atol=1e-12), seed
        if not np.isclose(greedy, brute_force(problem).objective.score, atol=1e-12):
            guarded.append(seed)
    assert guarded == [2, 15]  # the CPU pods whose best node would strand its GPUs


def test_greedy_objective_beats_first_fit_on_average():
    wins = 0
    for seed in range(20):
        problem = random_problem(200 + seed, nodes=12, pods=20)
        greedy = solvers.make("greedy-objective").solve(problem).objective.score
        first = solvers.make("first-fit").solve(problem).objective.score
        wins += greedy >= first - 1e-12
    assert wins >= 16
