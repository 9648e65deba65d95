"""greedy-objective's ties: a tolerance relative to the weights, the same in select and rank.
Each test below failed before its fix (see the comment above it)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import solvers
from iro_fed.feasibility import feasible_nodes
from iro_fed.model import ClusterState, Problem
from iro_fed.testing import random_problem
from solvers.heuristics import free_share_after


def _scaled(problem: Problem, factor: float) -> Problem:
    w = problem.weights
    return problem.replace(weights=dataclasses.replace(w, **{k: getattr(w, k) * factor for k in w.__dataclass_fields__}))


def _loose_and_tight(state: ClusterState, w: int) -> np.ndarray:
    """Two feasible nodes for ``w``: the one left with the most free share, then the least."""
    cand = np.flatnonzero(feasible_nodes(state, w))
    share = free_share_after(state, w, cand)
    assert share.max() > share.min()
    return cand[[int(np.argmax(share)), int(np.argmin(share))]]


# Before: np.round(scores, 12) split two scores one float apart (5.5e-17) at a rounding
# boundary, so the looser node won on noise instead of the tie going to the best fit.
def test_scores_one_float_apart_across_a_rounding_boundary_tie():
    low = 0.3000000000005
    high = float(np.nextafter(low, 1.0))
    assert np.round(low, 12) != np.round(high, 12) and high - low < 1e-16  # the straddle
    state = ClusterState(random_problem(3, nodes=8, pods=6))
    solver = solvers.make("greedy-objective")
    candidates = _loose_and_tight(state, 0)
    scores = np.array([high, low])  # the loose node a hair ahead
    assert solver.select(state, 0, candidates, scores) == 1  # the tight fit
    assert solver.rank_order(state, 0, candidates, scores).tolist() == [1, 0]
    # a real difference still decides
    scores = np.array([low + 1e-9, low])
    assert solver.select(state, 0, candidates, scores) == 0
    assert solver.rank_order(state, 0, candidates, scores).tolist() == [0, 1]


# Before: with every weight ~1e-13 every score rounded to 0, so every node tied and
# greedy-objective was best-fit (58 of random_problem seeds 0-59 at 8 nodes, 6 pods placed
# differently than with the same weights times 1e13). R scales with the weights, its argmax not.
@pytest.mark.parametrize("factor", [1e-13, 1e6])
def test_placement_does_not_change_when_all_weights_are_scaled(factor):
    for seed in range(20):
        problem = random_problem(seed, nodes=8, pods=6)
        solver = solvers.make("greedy-objective")
        expected = solver.solve(problem)
        got = solver.solve(_scaled(problem, factor))
        np.testing.assert_array_equal(got.assignment, expected.assignment, err_msg=f"seed {seed}")
        assert got.gpu_cards == expected.gpu_cards


def test_the_tiny_weights_case_is_not_best_fit_by_accident():
    # the scaled problem of the test above is one where ties would change the answer
    problem = random_problem(0, nodes=8, pods=6)
    greedy = solvers.make("greedy-objective").solve(_scaled(problem, 1e-13)).assignment
    assert not np.array_equal(greedy, solvers.make("best-fit").solve(problem).assignment)


# rank's order of nodes near each other but not near the best: each group leader takes the
# nodes within the tolerance below it, tied by fit, as select does for the first group.
def test_rank_groups_below_the_best_also_go_to_the_best_fit():
    state = ClusterState(random_problem(3, nodes=8, pods=6))
    solver = solvers.make("greedy-objective")
    loose, tight = _loose_and_tight(state, 0)
    best = int(next(n for n in np.flatnonzero(feasible_nodes(state, 0)) if n not in (loose, tight)))
    candidates = np.array([best, loose, tight])
    low = 0.3000000000005
    scores = np.array([low + 1e-6, float(np.nextafter(low, 1.0)), low])
    assert solver.rank_order(state, 0, candidates, scores).tolist() == [0, 2, 1]
