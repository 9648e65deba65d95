"""cpsat's and time-budget's reports when the time runs out.

* ``info["not_reached"]`` lists only pods that no part of the solve weighed. It used to list every
  pod the hint had not reached, also those the final polish weighed and left out because placing
  them lowers R, so time-budget's ``then`` placed them (seed-3 problem below, hint 'none', no
  model in the budget: ``not_reached`` [1, 2, 3, 4, 5, 7], and ``then`` put pod 7 on a node,
  R -1.2287 -> -1.2956).
* ``info["pruned"]`` is true only when a model over pruned candidates was built (it stayed true
  when the pruning, or the build after it, ran out of time); ``info["pruning"]`` says whether the
  pruning was ``done`` or ``not completed``.
* time-budget's result pieced together by ``then`` gets a status from the placement itself
  (``check_placement``), never the default ``feasible`` for an invalid one.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("ortools")

import solvers
from iro_fed.feasibility import check_placement, feasible_nodes
from iro_fed.model import ClusterState, Problem
from iro_fed.placement import Placement
from iro_fed.problem_io import problem_from_dict
from iro_fed.testing import random_problem, random_problem_doc
from solvers import cpsat, local_search
from solvers.base import Solver, SolverProperties

# Below MIN_RESERVE_S (0.05 s): the cap before the build has passed when the solve starts, so no
# model is ever built, while the final polish still has half the reserve less this short budget.
NO_MODEL_LIMIT_S = 0.049
# The pod R leaves out of the problem below although it fits (its one feasible node's marginal is
# -0.0052). It was pod 7 while the power model charged CPU on a GPU node its cards' dynamic power.
LEFT_OUT = 6


def cheap_unplaced() -> Problem:
    doc = random_problem_doc(3, nodes=4, pods=8)
    doc["weights"]["unplaced"] = 0.1  # a pod left out costs little: R leaves some out that fit
    return problem_from_dict(doc)


def test_a_whole_polish_round_weighs_every_pod_and_none_is_not_reached():
    p = cheap_unplaced()
    state = ClusterState(p)
    weighed = np.zeros(p.num_workloads, dtype=bool)
    local_search.improve(p, state, weighed=weighed)
    assert weighed.all()
    assert state.assignment[LEFT_OUT] < 0 and feasible_nodes(state, LEFT_OUT).any()  # R's choice
    unplaced = [w for w in range(p.num_workloads) if state.assignment[w] < 0]
    assert unplaced  # what the old rule listed as not reached
    assert cpsat._not_reached(state, list(range(p.num_workloads)), weighed) == []


def test_a_polish_past_its_deadline_weighs_nothing():
    p = cheap_unplaced()
    state = ClusterState(p)
    weighed = np.zeros(p.num_workloads, dtype=bool)
    assert local_search.improve(p, state, deadline=time.perf_counter() - 1.0, weighed=weighed) == 0
    assert not weighed.any()
    assert cpsat._not_reached(state, [0, 3, LEFT_OUT], weighed) == [0, 3, LEFT_OUT]


def test_a_partial_round_weighs_the_pods_it_reached():
    p = cheap_unplaced()
    state = ClusterState(p)
    state.place(0, int(np.flatnonzero(feasible_nodes(state, 0))[0]))
    weighed = np.array([True, True, False, False, True, False, False, False])
    assert cpsat._not_reached(state, list(range(p.num_workloads)), weighed) == [2, 3, 5, 6, 7]


def test_cpsat_without_a_model_lists_only_unweighed_pods_as_not_reached():
    p = cheap_unplaced()
    placement = solvers.make("cpsat", seed=0, hint="none", time_limit_s=NO_MODEL_LIMIT_S).solve(p)
    info = placement.info
    assert info["status"] == "not_run" and "build" in info["wall_clock_cut"]
    for w, why in placement.reasons.items():  # the reasons agree with the list, however the polish went
        if why.startswith(f"0/{p.num_nodes} "):
            continue  # fits nowhere: the reason is kube-scheduler's alone
        if w in info["not_reached"]:
            assert why.endswith("the time limit passed before a model was built (no hint).")
        else:
            assert why.endswith("would lower the objective R.")
    if "polish" not in info["wall_clock_cut"]:  # the polish ran to its end: it weighed every pod
        assert info["not_reached"] == []  # was [1, 2, 3, 4, 5, 7]
        assert placement.assignment[LEFT_OUT] < 0
        budget = solvers.make(
            "time-budget", seed=0, solver="cpsat", budget_s=60.0, then="first-fit",
            solver_params={"hint": "none", "time_limit_s": NO_MODEL_LIMIT_S},
        ).solve(p)
        assert budget.assignment[LEFT_OUT] < 0  # then no longer places what R left out
        assert budget.objective.score >= placement.objective.score - 1e-12


def test_pruned_is_true_only_for_a_model_built_over_pruned_candidates():
    p = random_problem(77, nodes=20, pods=40)
    info = solvers.make("cpsat", max_candidates=2, max_deterministic_time=0.5).solve(p).info
    assert info["pruned"] is True and info["pruning"] == "done" and info["num_variables"] > 0
    info = solvers.make("cpsat").solve(p).info
    assert info["pruned"] is False and info["pruning"] is None  # none needed
    info = solvers.make("cpsat", max_candidates=2).solve_until(p, time.perf_counter() - 1.0).info
    assert info["pruned"] is False and info["pruning"] is None  # the time was up before it began


def test_pruning_cut_by_the_time_limit_is_not_reported_as_pruned():
    # The cap is 0.01 s after the start; the feasibility matrix and the pruning of 1,500 pods on
    # 800 nodes take 0.04 s here, so the pruning stops (or, after a stall, never starts).
    p = random_problem(7, nodes=800, pods=1500, constraints=False)
    info = solvers.make("cpsat", hint="none", max_candidates=1, time_limit_s=0.06).solve(p).info
    assert info["status"] == "not_run" and info["num_variables"] is None
    assert info["pruned"] is False  # was True
    assert info["pruning"] in (None, "not completed")


class PartlyOverbooked(Solver):
    """A batch solver that claims ``optimal`` for a placement over capacity on node 0 and leaves
    its last pod for the caller (a test double for a faulty inner solver)."""

    name = "test-sinfo-overbooked"
    properties = SolverProperties("batch", False, "Ignores capacity, leaves one pod (test double).")

    def _solve(self, problem: Problem, deadline: float | None) -> Placement:
        assignment = np.zeros(problem.num_workloads, dtype=np.int64)
        assignment[-1] = -1
        return Placement(assignment=assignment, status="optimal", info={"not_reached": [problem.num_workloads - 1]})


@pytest.fixture
def overbooked():
    solvers.register(PartlyOverbooked)
    yield
    solvers._REGISTRY.pop(PartlyOverbooked.name)


def test_time_budget_then_path_reports_an_invalid_placement(overbooked):
    p = random_problem(2, nodes=3, pods=12, constraints=False)
    placement = solvers.make("time-budget", solver=PartlyOverbooked.name, then="first-fit").solve(p)
    assert placement.info["finished_by"] == "first-fit" and placement.info["pods_after_budget"] == 1
    violations = check_placement(p, placement.assignment, placement.gpu_cards)
    assert violations
    assert placement.status == "infeasible"  # was the default "feasible"
    assert placement.info["violations"] == violations


def test_time_budget_then_path_after_cpsat_is_feasible_not_optimal():
    p = random_problem(3, nodes=12, pods=40)
    placement = solvers.make(
        "time-budget", seed=0, solver="cpsat", solver_params={"hint": "none"}, budget_s=0.0, then="best-fit"
    ).solve(p)
    assert placement.info["finished_by"] == "best-fit"
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []
    assert placement.status == "feasible" and "violations" not in placement.info
