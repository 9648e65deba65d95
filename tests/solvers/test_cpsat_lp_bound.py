"""The bound from the model's LP relaxation (PlacementModel.lp_bound) and how the cpsat solver
reports it (best_bound, cpsat_bound, lp_bound, bound_source); and the cardinality cuts, whose
rows the LP found CP-SAT calling invalid."""

from __future__ import annotations

import time

import numpy as np
import pytest

import solvers
from iro_fed.feasibility import feasible_matrix
from iro_fed.model import ClusterState
from iro_fed.problem_io import problem_from_dict
from iro_fed.testing import brute_force, random_problem
from solvers.cpsat_model import PlacementModel
from tests.solvers import fuzz_problems


def _whole_model(p) -> PlacementModel:
    state = ClusterState(p)
    return PlacementModel(p, state, np.arange(p.num_workloads), feasible_matrix(p, state), 256)


@pytest.mark.parametrize("seed", range(16))
def test_the_lp_bound_is_never_below_the_optimum(seed: int) -> None:
    # Tiny problems with GPU shares, whole GPUs, taints, latency limits and nodes that may power
    # on: the relaxation's optimum is at least the brute-force optimum of R (an exact model), and
    # at least what CP-SAT proves optimal for the model.
    p = random_problem(seed, nodes=3, pods=5)
    model = _whole_model(p)
    bound = model.lp_bound()
    assert bound is not None
    result = model.solve(seed=0, wall_limit=30.0, deterministic_limit=None)
    assert result.proved
    assert bound >= result.objective - 1e-9
    if model.exact:
        assert bound >= brute_force(p).objective.score - 1e-9


def test_the_lp_bound_is_tight_when_the_relaxation_is_integral() -> None:
    # One pod, nodes with room: the LP picks the best node outright, so its bound is R's optimum.
    p = random_problem(3, nodes=3, pods=1, gpus=False, constraints=False)
    model = _whole_model(p)
    assert model.lp_bound() == pytest.approx(brute_force(p).objective.score, abs=1e-6)


def test_no_lp_bound_past_its_deadline() -> None:
    model = _whole_model(random_problem(0, nodes=3, pods=5))
    assert model.lp_bound(deadline=time.perf_counter() - 1.0) is None


def test_a_solve_cut_short_reports_the_tighter_lp_bound() -> None:
    # A deterministic budget far too small for CP-SAT's own LP: its bound (if any) is loose, the
    # LP's is tighter, still above the answer's R, and the gaps are measured against it.
    p = random_problem(5, nodes=24, pods=90)
    placement = solvers.make("cpsat", seed=0, time_limit_s=60.0, max_deterministic_time=0.001).solve(p)
    info = placement.info
    assert info["exact_model"]
    assert info["bound_source"] == "lp relaxation"
    assert info["best_bound"] == info["lp_bound"]
    assert info["cpsat_bound"] is None or info["lp_bound"] < info["cpsat_bound"]
    assert info["best_bound"] >= placement.objective.score - 1e-9
    lowest = -(p.weights.cost + p.weights.carbon + p.weights.unplaced)
    expected = (info["best_bound"] - placement.objective.score) / (info["best_bound"] - lowest)
    assert info["final_gap"] == pytest.approx(expected)
    if info["objective"] is not None:
        assert info["gap_abs"] == pytest.approx(info["best_bound"] - info["objective"])
    assert "lp_bound" in info["time_s"]
    assert "(the model's LP relaxation)" in solvers.make("cpsat").describe(placement)


def test_a_proved_optimum_needs_no_lp() -> None:
    p = random_problem(1, nodes=3, pods=5)
    placement = solvers.make("cpsat", seed=0).solve(p)
    info = placement.info
    assert placement.status == "optimal"
    assert info["bound_source"] == "cpsat" and info["lp_bound"] is None
    assert info["best_bound"] == info["cpsat_bound"]
    assert "LP relaxation" not in solvers.make("cpsat").describe(placement)


def test_lp_bound_off_keeps_cpsat_bound() -> None:
    p = random_problem(5, nodes=24, pods=90)
    on = solvers.make("cpsat", seed=0, time_limit_s=60.0, max_deterministic_time=0.001).solve(p)
    off = solvers.make("cpsat", seed=0, time_limit_s=60.0, max_deterministic_time=0.001, lp_bound=False).solve(p)
    assert off.info["lp_bound"] is None and "lp_bound" not in off.info["time_s"]
    assert off.info["best_bound"] == off.info["cpsat_bound"]
    assert off.info["bound_source"] == (None if off.info["cpsat_bound"] is None else "cpsat")
    # The placement is the same either way: the LP only reports.
    assert on.assignment.tolist() == off.assignment.tolist() and on.gpu_cards == off.gpu_cards


def test_alongside_the_lp_runs_in_its_own_thread_and_the_tighter_bound_is_kept() -> None:
    p = random_problem(5, nodes=24, pods=90)
    placement = solvers.make("cpsat", seed=0, time_limit_s=2.0, deterministic=False, num_workers=2).solve(p)
    info = placement.info
    assert info["lns"] is not None and info["exact_model"]
    assert info["lp_bound"] is not None  # solved alongside, whatever CP-SAT's bound
    if info["cpsat_bound"] is not None and info["cpsat_bound"] <= info["lp_bound"]:
        assert info["bound_source"] == "cpsat" and info["best_bound"] == info["cpsat_bound"]
    else:
        assert info["bound_source"] == "lp relaxation" and info["best_bound"] == info["lp_bound"]
    assert info["best_bound"] >= placement.objective.score - 1e-9


def test_no_lp_bound_on_pruned_candidates() -> None:
    # A bound on pruned candidates is the model's only: tighter, the LP's fell below the polished
    # answer's R (1000 x 500). CP-SAT's stays.
    p = random_problem(5, nodes=24, pods=90)
    for deterministic in (True, False):
        placement = solvers.make(
            "cpsat", seed=0, time_limit_s=60.0 if deterministic else 2.0, max_candidates=2,
            deterministic=deterministic, max_deterministic_time=0.001 if deterministic else None,
        ).solve(p)
        info = placement.info
        assert info["pruned"] and not info["exact_model"]
        assert info["lp_bound"] is None and info["best_bound"] == info["cpsat_bound"]


# Fuzz problems whose whole model held a cardinality cut CP-SAT called invalid (a row [0, -1]:
# rounding made the cut drop one pod more than the set held; or no variable at all, when only
# pods without a candidate were confined to the set): 18 of 847 broad / tight / brim problems
# (seeds 0-299) before. CP-SAT then gave nothing and the answer was the hint's and the search's.
@pytest.mark.parametrize("family, seed", [("broad", 134), ("broad", 296), ("tight", 155), ("tight", 189)])
def test_cardinality_cuts_keep_the_model_valid(family: str, seed: int) -> None:
    p = problem_from_dict(getattr(fuzz_problems, family)(seed))
    model = _whole_model(p)
    for c in model.model.proto.constraints:
        if c.has_linear():
            domain = c.linear.domain
            assert len(c.linear.vars) > 0 and domain[0] <= domain[len(domain) - 1]
    result = model.solve(seed=0, wall_limit=30.0, deterministic_limit=None)
    assert result.status in ("optimal", "feasible")
    assert model.lp_bound() >= result.objective - 1e-9
    if p.num_workloads * p.num_nodes <= 18:  # brute force: at most 6 pods on 3 nodes
        assert result.objective == pytest.approx(brute_force(p).objective.score, abs=1e-6) or not model.exact
