"""``cpsat`` keeps to ``time_limit_s`` where steps used to run past it: the candidate matrix is
computed per group of identical pods with the clock checked between groups (the whole-matrix
broadcast took 0.12-0.20 s at 1000 x 5000, past a 0.2 s limit), the unplaced pods' reasons once
per group, CP-SAT is not started with less than ``MIN_CPSAT_S`` left (loading a model takes
longer), and ``info["skipped"]`` names the optional steps not started for lack of time. The
deadlines here have passed before the solve starts, or are far off, so nothing depends on the
machine's speed."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("ortools")

import solvers
from iro_fed.feasibility import check_placement, explain, feasible_matrix, feasible_nodes, pod_groups
from iro_fed.model import ClusterState
from iro_fed.problem_io import problem_from_dict
from iro_fed.testing import random_problem_doc
from solvers import cpsat, cpsat_model, local_search
from solvers.local_search import OutOfTime, unplaced_reasons


def problem(seed: int = 3):
    """12 nodes, 45 pods: 15 random pods three times each, interleaved (groups of identical pods,
    as a deployment's replicas make them)."""
    doc = random_problem_doc(seed, nodes=12, pods=15)
    wls = doc["workloads"]
    doc["workloads"] = [{**wls[j], "name": f"{wls[j]['name']}-{k}"} for k in range(3) for j in range(len(wls))]
    return problem_from_dict(doc)


@pytest.mark.parametrize("seed", range(6))
def test_the_candidate_matrix_is_the_feasibility_matrix(seed: int):
    p = problem(seed)
    assert len(pod_groups(p)) < p.num_workloads  # identical pods share a row
    state = ClusterState(p)
    # Against a cluster with pods on it too, as the matrix is taken of any state.
    hint, _, _ = solvers.make("best-fit").run(p)
    for st in (state, hint):
        expected = feasible_matrix(p, st)
        got = local_search.candidate_matrix(p, st, deadline=time.perf_counter() + 3600.0)
        assert got.dtype == bool and (got == expected).all()


def test_the_candidate_matrix_stops_at_its_deadline():
    p = problem()
    with pytest.raises(OutOfTime):
        local_search.candidate_matrix(p, ClusterState(p), deadline=time.perf_counter() - 1.0)


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_limit_that_only_the_hint_fits_returns_the_hint_and_names_the_skipped_steps(deterministic: bool):
    p = problem()
    placement = solvers.make("cpsat", seed=0, deterministic=deterministic).solve_until(p, time.perf_counter() - 1.0)
    info = placement.info
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []
    assert placement.assignment.tolist() == solvers.make("best-fit").solve(p).assignment.tolist()
    assert info["status"] == "not_run"
    # Before: no "skipped"; the steps ran past the limit only to stop at once, or, for the
    # candidate matrix, ran whole.
    assert info["skipped"] == ["hint_polish", "build", "cpsat", "lns", "polish"]
    assert info["hint"]["polish_moves"] == 0 and info["polish_moves"] == 0
    # Every unplaced pod still has kube's reason.
    assert set(placement.reasons) == set(np.flatnonzero(placement.assignment < 0).tolist())
    assert all(placement.reasons.values())


def test_without_lns_or_polish_only_the_steps_asked_for_are_named():
    p = problem()
    placement = solvers.make("cpsat", seed=0, lns=False, polish=False).solve_until(p, time.perf_counter() - 1.0)
    assert placement.info["skipped"] == ["build", "cpsat"]
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []


def test_an_ample_limit_skips_nothing():
    p = problem()
    placement = solvers.make("cpsat", seed=1, time_limit_s=60.0, max_deterministic_time=0.3).solve(p)
    assert placement.info["skipped"] == [] and placement.info["wall_clock_cut"] == []


@pytest.mark.parametrize("deterministic", [True, False])
def test_cpsat_is_not_started_with_less_than_its_least_run_left(monkeypatch, deterministic: bool):
    # A least run longer than any limit: the model is built, CP-SAT is skipped (it used to be
    # started with at least 0.01 s whatever was left, and loading a model took 0.015-0.03 s more);
    # the search and the polish still improve the hint.
    monkeypatch.setattr(cpsat, "MIN_CPSAT_S", 1e9)
    p = problem()
    placement = solvers.make(
        "cpsat", seed=0, time_limit_s=60.0, max_deterministic_time=0.3, deterministic=deterministic
    ).solve(p)
    info = placement.info
    assert info["status"] == "not_run" and info["num_variables"] > 0
    assert info["skipped"] == ["cpsat"] and "cpsat" in info["wall_clock_cut"]
    assert info["lns"]["iterations"] > 0
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []
    assert placement.objective.score >= solvers.make("best-fit").solve(p).objective.score


def test_reasons_once_per_group_are_each_pods_own():
    p = problem(5)
    for state in (ClusterState(p), solvers.make("best-fit").run(p)[0]):
        not_reached = {int(w) for w in np.flatnonzero(state.assignment < 0)[::2]}
        reasons = unplaced_reasons(p, state, "cpsat", not_reached, "a model was built (no hint).")
        unplaced = np.flatnonzero(state.assignment < 0)
        assert unplaced.size and set(reasons) == set(unplaced.tolist())
        for w in unplaced.tolist():
            expected = explain(state, w)
            if feasible_nodes(state, w).any():
                expected += (
                    " Left unplaced by cpsat: the time limit passed before a model was built (no hint)."
                    if w in not_reached
                    else " Left unplaced by cpsat: placing it on a node that fits would lower the objective R."
                )
            assert reasons[w] == expected


@pytest.mark.parametrize("width", [1, 7, 8, 9, 61, 500])
def test_unique_rows_are_numpys_in_numpys_order(width: int):
    # The aggregate cuts take the first MAX_CARDINALITY_SETS of these sets by size, ties in this
    # order: the packed rows must give np.unique's rows in np.unique's order, or the model changes.
    rng = np.random.default_rng(width)
    base = rng.random((12, width)) < 0.5
    mask = base[rng.integers(0, 12, size=40)]  # repeated rows
    mask[0] = False
    mask[1] = True
    got = cpsat_model.unique_rows(mask)
    assert got.dtype == bool and np.array_equal(got, np.unique(mask, axis=0))
