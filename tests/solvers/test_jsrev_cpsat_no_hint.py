"""cpsat with ``hint='none'`` and a budget too small to build its model: no part of it weighed
any pod, so every pod is in ``info["not_reached"]`` (as the README promises) and time-budget's
``then`` places them. It used to report ``not_reached == []`` and give each pod the reason
"placing it on a node that fits would lower the objective R", so time-budget returned 0 of 40
pods placed (27 with the default hint). The deadlines here have passed before the solve starts,
so nothing depends on the machine's speed."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("ortools")

import solvers
from iro_fed.feasibility import check_placement
from iro_fed.testing import random_problem


def problem():
    return random_problem(3, nodes=12, pods=40)


def test_without_a_hint_every_pod_is_not_reached_when_no_model_was_built():
    p = problem()
    placement = solvers.make("cpsat", seed=0, hint="none").solve_until(p, time.perf_counter() - 1.0)
    info = placement.info
    assert info["status"] == "not_run" and "build" in info["wall_clock_cut"]
    assert (placement.assignment < 0).all()
    assert info["not_reached"] == list(range(p.num_workloads))  # was []
    for why in placement.reasons.values():
        assert "would lower the objective R" not in why  # nothing weighed them
    fits = [w for w, why in placement.reasons.items() if not why.startswith(f"0/{p.num_nodes} ")]
    assert fits
    for w in fits:
        assert placement.reasons[w].endswith("the time limit passed before a model was built (no hint).")


def test_time_budget_places_what_cpsat_without_a_hint_did_not_reach():
    p = problem()
    placement = solvers.make(
        "time-budget", seed=0, solver="cpsat", solver_params={"hint": "none"}, budget_s=0.0, then="best-fit"
    ).solve(p)
    best_fit = solvers.make("best-fit", seed=0).solve(p)
    assert placement.info["budget_exhausted"] is True and placement.info["finished_by"] == "best-fit"
    assert placement.info["pods_after_budget"] == p.num_workloads
    assert placement.assignment.tolist() == best_fit.assignment.tolist()  # was: every pod unplaced
    assert (placement.assignment >= 0).sum() > 0
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []


@pytest.mark.parametrize("hint", ["none"])  # with a hint, cpsat reaches every pod (the hint runs whole)
def test_time_budget_with_then_none_counts_the_pods_after_the_budget(hint: str):
    # As on time-budget's other paths (an online solver, or a batch solver that ran out).
    p = problem()
    placement = solvers.make(
        "time-budget", seed=0, solver="cpsat", solver_params={"hint": hint}, budget_s=0.0, then="none"
    ).solve(p)
    assert (placement.assignment < 0).all()
    assert placement.info["budget_exhausted"] is True
    assert placement.info["pods_after_budget"] == p.num_workloads  # was missing
    assert "finished_by" not in placement.info
    assert sorted(placement.reasons) == list(range(p.num_workloads))
