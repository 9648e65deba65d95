"""qubo's capacity constraints bound a node's load by ``free + fit_tolerance`` (the filters' and
check_placement's rule), not by ``free``: where what is free falls short of a request within the
tolerance, the pod fits everywhere else (filters, check_placement, cpsat), and the QUBO must not
price it as an overflow. The old bound ``max(free, 0)`` made the BQM's ground state leave the pod
out (only the repair's greedy pass put it back)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("dimod")
pytest.importorskip("dwave.samplers")
pytest.importorskip("ortools")

import dimod

import solvers
from iro_fed import problem_from_dict
from iro_fed.feasibility import check_placement, feasible_nodes, fit_tolerance
from iro_fed.model import ClusterState, Problem
from solvers.qubo import _BatchModel


def _problem(capacity: float, allocated: float, demand: float, pods: int = 2) -> Problem:
    """One node; ``pods`` identical pods of ``demand`` cpu (1 MiB each), at most one of which fits."""
    return problem_from_dict(
        {
            "resources": ["cpu", "memory"],
            "domains": [{"name": "z"}],
            "nodes": [
                {
                    "name": "a",
                    "domain": "z",
                    "capacity": {"cpu": capacity, "memory": 1000},
                    "allocated": {"cpu": allocated},
                }
            ],
            "workloads": [{"name": f"p{i}", "requests": {"cpu": demand, "memory": 1}} for i in range(pods)],
        }
    )


# A node of 1e10 cpu has a tolerance of 0.01: 0.005 free takes a 0.014 pod (free + tol >= demand), not two
# (check_placement allows the tolerance plus 1e-12 of the amounts for the rounding of sums: 0.02).
FAR = (1e10, 1e10 - 0.005, 0.014)
# A float hair: 0.3 - 0.1 = 0.19999999999999998 < 0.2.
HAIR = (0.3, 0.1, 0.2)


@pytest.mark.parametrize("case", [FAR, HAIR], ids=["tolerance", "hair"])
def test_the_pod_fits_by_the_filters_rule(case):
    p = _problem(*case)
    free = ClusterState(p).free[0, p.cpu_index]
    demand = p.demand[0, p.cpu_index]
    assert free < demand <= free + fit_tolerance(p)[0, p.cpu_index]
    assert feasible_nodes(ClusterState(p), 0)[0]
    assert not check_placement(p, np.array([0, -1]), {})


@pytest.mark.parametrize("capacity", ["unbalanced", "slack"])
@pytest.mark.parametrize("alpha", [4.0, 16.0])
def test_ground_state_places_the_pod_that_fits_within_the_tolerance(capacity, alpha):
    """At a penalty high enough that the ground state is feasible (lower ones put both pods on
    the node; the calibration raises it), the ground state places one pod, as cpsat does."""
    p = _problem(*FAR)
    model = _BatchModel(p, ClusterState(p), np.arange(p.num_workloads), 8, capacity)
    ground = dimod.ExactSolver().sample(model.bqm(alpha)).first.sample
    sample = np.array([ground[v] for v in range(model.num_variables)])
    chosen, feasible = model.decode(sample)
    placed = sorted(int(model.pods[i]) for i, ks in chosen.items() if ks)
    assert feasible
    assert len(placed) == 1  # old: [] (the bound was 0.005: 0.009 short, most of a pod)


@pytest.mark.parametrize("capacity", ["unbalanced", "slack"])
@pytest.mark.parametrize("case", [FAR, HAIR], ids=["tolerance", "hair"])
def test_qubo_places_what_cpsat_places(capacity, case):
    """Seed 0, without refinement and polish: the sampled batch alone (old, slack bits at 1e10:
    the repair's greedy pass put the other pod there, [-1, 0])."""
    p = _problem(*case)
    ref = solvers.make("cpsat", seed=0).solve(p)
    got = solvers.make("qubo", seed=0, capacity=capacity, refine_steps=0, polish=False).solve(p)
    assert (ref.assignment >= 0).sum() == 1
    assert got.assignment.tolist() == ref.assignment.tolist()
    assert not check_placement(p, got.assignment, got.gpu_cards)


def test_slack_bits_of_an_exact_room_are_unchanged():
    """Room for exactly one pod (1000 of 1000 free, tolerance 1e-9): one slack bit of 1000, as
    without the tolerance (sized from free + tol it took a second bit of weight 1e-9)."""
    p = _problem(2000.0, 1000.0, 1000.0)
    model = _BatchModel(p, ClusterState(p), np.arange(p.num_workloads), 8, "slack")
    slack = model.num_variables - (model.o0 + model.switch.size)
    assert slack == 1
