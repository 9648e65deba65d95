"""The ``qubo`` solver's faster paths compute exactly what the slower ones did: the repair's
one-node feasibility test, the candidate nodes shared by pods of one shape, and the BQM's linear
penalties added in one pass. Exact equality, not approximate: the solver's placement for a
seed must not change."""

from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("dimod")
pytest.importorskip("dwave.samplers")

from iro_fed import problem_from_dict
from iro_fed.feasibility import feasible_nodes, fit_tolerance
from iro_fed.model import ClusterState
from iro_fed.testing import random_problem_doc
from solvers.qubo import _BatchModel
from tests.solvers.test_jsrev_qubo_fits import candidates_pod_by_pod


def _doubled(seed: int, nodes: int, pods: int):
    """A random problem whose workloads each appear twice (another name; every other twin
    also with a node selector: the same requests under other constraints)."""
    doc = random_problem_doc(seed, nodes=nodes, pods=pods)
    twins = copy.deepcopy(doc["workloads"])
    for j, wl in enumerate(twins):
        wl["name"] += "-twin"
        if j % 2:
            wl["node_selector"] = {"tier": "gold"}
    doc["workloads"] = doc["workloads"] + twins
    return problem_from_dict(doc)


@pytest.mark.parametrize("seed", range(12))
def test_one_node_fit_is_feasible_nodes_on_that_node(seed):
    """GPU shares, k-GPU pods, taints, latency bounds and overcommitted nodes (allocated over
    capacity), in states filled pod by pod: the repair's test agrees with feasible_nodes on
    every pod and node."""
    problem = _doubled(seed, nodes=5, pods=8)
    allocated = problem.allocated.copy()
    if seed % 3 == 0:  # a node used past its capacity: no resource it is short of fits
        allocated[0] = problem.capacity[0] * 1.5
    elif seed % 3 == 1:  # free cpu short of pod 0's request within the tolerance on node 0, just past it on node 1
        cpu = problem.cpu_index
        # Nodes 0 and 1 at least as large as pod 0 (a larger pod needed negative usage, which a
        # Problem refuses).
        capacity = problem.capacity.copy()
        capacity[:2, cpu] = np.maximum(capacity[:2, cpu], problem.demand[0, cpu])
        problem = problem.replace(capacity=capacity)
        tol = fit_tolerance(problem)[:, cpu]  # relative to each node's capacity (2*EPS was inside it)
        allocated[0, cpu] = problem.capacity[0, cpu] - problem.demand[0, cpu] + tol[0] / 2
        allocated[1, cpu] = problem.capacity[1, cpu] - problem.demand[0, cpu] + 2 * tol[1]
    problem = problem.replace(allocated=allocated)
    if seed % 3 == 1:  # the edges are where the comment says
        free, demand = ClusterState(problem).free[:, cpu], problem.demand[0, cpu]
        assert free[0] < demand <= free[0] + tol[0]
        assert free[1] + tol[1] < demand
    pods = np.arange(problem.num_workloads)
    model = _BatchModel(problem, ClusterState(problem), pods, 8, "unbalanced")
    state = ClusterState(problem)
    rng = np.random.default_rng(seed)
    checked = 0
    for w in rng.permutation(pods):
        for v in pods:
            mask = feasible_nodes(state, int(v))
            for n in range(problem.num_nodes):
                assert model._fits(state, int(v), n) == bool(mask[n]), (int(v), n)
                checked += 1
        fits = np.flatnonzero(feasible_nodes(state, int(w)))
        if fits.size:
            state.place(int(w), int(rng.choice(fits)))
    assert checked and (state.assignment >= 0).any()


@pytest.mark.parametrize("seed", range(8))
def test_pods_of_one_shape_get_the_candidates_each_would_get_alone(seed):
    """Candidates per pod: its greedy reference node plus its best feasible nodes by marginal
    gain (computed here pod by pod, as before pods of one shape shared the ranking)."""
    problem = _doubled(seed, nodes=6, pods=6)
    state = ClusterState(problem)
    pods = np.arange(problem.num_workloads)
    max_candidates = 3
    model = _BatchModel(problem, state, pods, max_candidates, "unbalanced")
    expected_pw, expected_pn = candidates_pod_by_pod(problem, state, pods, max_candidates)
    assert model.pw.tolist() == expected_pw
    assert model.pn.tolist() == expected_pn
    assert model.pw.dtype == model.pn.dtype == np.int64


@pytest.mark.parametrize("capacity", ["unbalanced", "slack"])
@pytest.mark.parametrize("seed", range(6))
def test_linear_penalties_in_one_pass_equal_term_by_term(seed, capacity):
    """The BQM's linear biases, to the last bit, as adding each penalty term in turn (one-hot,
    power-on, capacities, then the unbalanced l1 part)."""
    problem = _doubled(seed, nodes=4, pods=6)
    model = _BatchModel(problem, ClusterState(problem), np.arange(problem.num_workloads), 8, capacity)
    for alpha, l1 in ((0.5, 1.0), (1.28, 5.0), (3.3, 3.0)):
        pen = alpha * model.scale
        linear = model.lin_obj.copy()
        for vs, ws in model.pen_lin:
            np.add.at(linear, vs, pen * ws)
        for vs, ws in model.shift_lin:
            np.add.at(linear, vs, pen * l1 * ws)
        got, _, _ = model.bqm(alpha, l1).to_numpy_vectors(variable_order=range(model.num_variables))
        assert np.array_equal(got, linear)
