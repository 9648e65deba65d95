"""``cpsat``'s wall-clock limit bounds the whole solve: the online hint, its polish, the candidate
pruning and the model build end by the limit (less the reserve for decoding), where they used to
run to completion before CP-SAT got what was left (1000 x 5000 of the joint-solver benchmark at
time_limit_s=0.1: 0.62 s). With ``deterministic`` the phases are bounded by deterministic measures
and ``info["wall_clock_cut"]`` names any the limit stopped first. The deadlines here have passed
before the solve starts (or are far off), so no assertion depends on the machine's speed."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("ortools")

import solvers
from iro_fed.feasibility import check_placement, feasible_matrix
from iro_fed.model import ClusterState
from iro_fed.testing import random_problem
from solvers.cpsat import _prune
from solvers.cpsat_model import PlacementModel
from solvers.local_search import OutOfTime


def problem():
    return random_problem(3, nodes=12, pods=40)


@pytest.mark.parametrize("deterministic", [True, False])
def test_an_expired_deadline_builds_no_model(deterministic: bool):
    p = problem()
    solver = solvers.make("cpsat", time_limit_s=10.0, seed=0, deterministic=deterministic)
    placement = solver.solve_until(p, time.perf_counter() - 1.0)
    info = placement.info
    # Before: the model was built and CP-SAT ran (status 'optimal' or 'feasible'), all after the
    # deadline. The first hint runs whole (it is the floor of the answer): its placement is
    # returned; the default's second (iro-frag) has no time, and best-fit places all its pods.
    assert info["status"] == "not_run" and info["num_variables"] is None
    assert info["hint"]["completed"] == {"by": "best-fit", "pods": {"iro-frag": p.num_workloads}}
    cut = ["hint", "hint_polish", "build", "polish"] if deterministic else ["build", "polish"]
    assert info["wall_clock_cut"] == cut
    assert placement.assignment.tolist() == solvers.make("best-fit").solve(p).assignment.tolist()
    assert info["not_reached"] == []
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []
    assert set(info["time_s"]) == {"hint", "hint_polish", "build", "cpsat", "polish", "decode", "total"}


def test_a_model_build_past_its_deadline_stops():
    p = problem()
    state0 = ClusterState(p)
    cand = feasible_matrix(p, state0)
    pods = np.arange(p.num_workloads)
    with pytest.raises(OutOfTime):
        PlacementModel(p, state0, pods, cand, 256, deadline=time.perf_counter() - 1.0)
    with pytest.raises(OutOfTime):
        _prune(p, cand, None, 2, deadline=time.perf_counter() - 1.0)
    far = time.perf_counter() + 3600.0
    built = PlacementModel(p, state0, pods, cand, 256, deadline=far)
    assert built.num_variables == PlacementModel(p, state0, pods, cand, 256).num_variables > 0
    assert (_prune(p, cand, None, 2, deadline=far) == _prune(p, cand, None, 2)).all()


def test_the_search_says_when_the_wall_clock_stopped_it_with_deterministic_budget_left():
    p = problem()
    solver = solvers.make("cpsat", seed=0)
    start = ClusterState(p)
    _, stats = solver._lns(p, start, time.perf_counter() - 1.0, 1.0)
    assert stats["stopped"] == "wall clock" and stats["iterations"] == 0  # was "budget"
    _, stats = solver._lns(p, start, time.perf_counter() - 1.0, None)
    assert stats["stopped"] == "budget"  # without a deterministic budget the wall clock is the budget


def test_deterministic_placement_is_the_same_under_any_limit_that_cuts_nothing():
    # The same deterministic budget under 20 s and 60 s: nothing is cut, so the placement is the
    # seed's; the phases' times add up to the total.
    p = problem()
    runs = [solvers.make("cpsat", seed=1, time_limit_s=limit, max_deterministic_time=0.3).solve(p) for limit in (20.0, 60.0)]
    for r in runs:
        assert r.info["wall_clock_cut"] == []
        times = r.info["time_s"]
        assert sum(v for k, v in times.items() if k != "total") == pytest.approx(times["total"])
        assert check_placement(p, r.assignment, r.gpu_cards) == []
    assert runs[0].assignment.tolist() == runs[1].assignment.tolist()
    assert runs[0].gpu_cards == runs[1].gpu_cards


def test_pods_no_part_reached_say_so():
    p = problem()
    placement = solvers.make("cpsat", seed=0, hint="none").solve_until(p, time.perf_counter() - 1.0)
    fits = [w for w, why in placement.reasons.items() if not why.startswith(f"0/{p.num_nodes} ")]
    assert fits  # pods that fit a node of the (empty) final cluster
    for w in fits:
        # Was "placing it on a node that fits would lower the objective R": nothing weighed it.
        assert placement.reasons[w].endswith("the time limit passed before a model was built (no hint).")
