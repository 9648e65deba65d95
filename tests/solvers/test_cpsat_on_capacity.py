"""cpsat's capacity rows times ``on`` for nodes that may power on (``ON_CAPACITY_CUTS``): valid
(the model's optimum is still R's, brute-forced) and stronger (the model's LP relaxation, solved
by GLOP, bounds R more tightly: the big-M link ``x <= |g| on`` let the LP spread pods thinly
over every empty node, each charged a sliver of its power-on)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ortools")

import solvers
import solvers.cpsat_model as cpsat_model
from iro_fed import problem_from_dict
from iro_fed.feasibility import feasible_matrix
from iro_fed.model import ClusterState, Problem
from iro_fed.testing import brute_force, random_problem_doc
from solvers.cpsat_model import PlacementModel


def _consolidation(pods: int = 5, nodes: int = 4) -> Problem:
    """Empty nodes of one shape; pods of distinct shapes (no two grouped), 2-3 to a node."""
    return problem_from_dict({
        # No U: its exact level encoding has an aggregate row (usage <= capacity on) that hides the
        # per-node link here, and its tangent surrogate (the mode past exact_levels) is not R.
        "weights": {"utilization": 0.0},
        "domains": [{"name": "az", "kind": "zone", "carbon_intensity": 200.0,
                     "price_per_hour": {"cpu": 0.04, "memory": 0.005}}],
        "nodes": [{"name": f"n{i}", "domain": "az", "capacity": {"cpu": 8000, "memory": 32768}} for i in range(nodes)],
        "workloads": [{"name": f"w{i}", "requests": {"cpu": 2500 + 100 * i, "memory": 4096 + 256 * i}}
                      for i in range(pods)],
    })


def _lp_bound(problem: Problem) -> float:
    """The LP relaxation of cpsat's whole-problem model (GLOP), in units of R; U's surrogate
    (``exact_levels=1``), which is R itself when U's weight is 0."""
    from ortools.linear_solver import pywraplp

    model = PlacementModel(problem, ClusterState(problem), np.arange(problem.num_workloads),
                           feasible_matrix(problem), exact_levels=1)
    proto = model.cp.proto
    lp = pywraplp.Solver.CreateSolver("GLOP")
    xs = []
    for v in proto.variables:
        domain = list(v.domain)
        xs.append(lp.NumVar(float(domain[0]), float(domain[-1]), ""))
    for c in proto.constraints:
        if c.has_at_most_one() or c.has_exactly_one():
            literals = list(c.at_most_one.literals if c.has_at_most_one() else c.exactly_one.literals)
            row = lp.Constraint(1.0 if c.has_exactly_one() else -lp.infinity(), 1.0)
            for i in literals:
                row.SetCoefficient(xs[i], 1.0)
            continue
        assert c.has_linear()
        if len(c.enforcement_literal):  # "on => some pod": left out, the relaxation only loosens
            continue
        domain = list(c.linear.domain)
        low = -lp.infinity() if domain[0] <= -(2**61) else float(domain[0])  # the model's +-2^62: none
        row = lp.Constraint(low, lp.infinity() if domain[-1] >= 2**61 else float(domain[-1]))
        for i, k in zip(c.linear.vars, c.linear.coeffs, strict=True):
            row.SetCoefficient(xs[i], row.GetCoefficient(xs[i]) + float(k))
    objective = lp.Objective()
    scale = 1e-10  # CP-SAT's integer coefficients (R times up to 10^13) kept in GLOP's comfort range
    for i, k in zip(proto.objective.vars, proto.objective.coeffs, strict=True):
        objective.SetCoefficient(xs[i], objective.GetCoefficient(xs[i]) + float(k) * scale)
    objective.SetMinimization()
    assert lp.Solve() == pywraplp.Solver.OPTIMAL
    return (objective.Value() / scale + proto.objective.offset) * proto.objective.scaling_factor


def test_on_capacity_rows_tighten_the_lp_bound_and_keep_it_valid(monkeypatch):
    problem = _consolidation()
    best = brute_force(problem).objective.score
    monkeypatch.setattr(cpsat_model, "ON_CAPACITY_CUTS", False)
    loose = _lp_bound(problem)
    monkeypatch.setattr(cpsat_model, "ON_CAPACITY_CUTS", True)
    tight = _lp_bound(problem)
    assert tight >= best - 1e-9 and loose >= best - 1e-9  # both bound R's optimum
    # The 5 pods need 2 nodes at least (13.5 of 8 cores each): the LP now pays for most of them.
    # Without the rows it spread them over all 4 nodes at 1/|g| = a pod's share of on each.
    assert loose - tight > 0.5 * (loose - best), (loose, tight, best)


@pytest.mark.parametrize("seed", range(6))
def test_cpsat_with_the_rows_reaches_the_brute_force_optimum_where_nodes_start_empty(seed):
    doc = random_problem_doc(seed + 300, nodes=3, pods=5)
    for node in doc["nodes"]:  # every node empty: each may stay off
        node.pop("allocated", None)
        if "gpu_free_milli" in node:
            node["gpu_free_milli"] = [1000] * len(node["gpu_free_milli"])
    problem = problem_from_dict(doc)
    placement = solvers.make("cpsat", seed=0, time_limit_s=20.0).solve(problem)
    assert placement.status == "optimal"
    assert placement.objective.score == pytest.approx(brute_force(problem).objective.score, abs=1e-9)


def test_search_targets_outside_a_neighbourhood_are_nodes_already_on():
    """A freed pod may leave its neighbourhood for its best other nodes that are on, never for one
    that would have to power on (each brought a power-on variable and U's levels into the step's
    model, and on consolidation problems most steps ended unsolved)."""
    from solvers.cpsat import _lns_targets

    problem = _consolidation(pods=5, nodes=6)
    state = ClusterState(problem)
    state.place(0, 1)  # node 1 on; nodes 2-5 empty (off)
    state.place(1, 3)  # node 3 on
    mask = np.zeros(problem.num_nodes, dtype=bool)
    mask[0] = True  # the neighbourhood: node 0
    targets = _lns_targets(problem, state, 4, mask, extra=16)
    assert np.flatnonzero(targets).tolist() == [0, 1, 3]  # its own node, and the two nodes on
