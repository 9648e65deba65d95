"""A batch solver's ``decide`` / ``rank`` raise a TypeError that says what to call instead (a
bare AttributeError before the fix); online solvers and the composites' online parts unchanged."""

from __future__ import annotations

import pytest

import solvers
from iro_fed.model import ClusterState
from iro_fed.testing import random_problem

BATCH = [name for name, cls in solvers.registered().items()
         if not issubclass(cls, solvers.OnlineSolver) and cls.properties.installed()]


def test_the_builtin_batch_solvers_are_covered():
    assert {"cpsat", "fallback", "time-budget"} <= set(BATCH)
    assert all(solvers.registered()[name].properties.mode == "batch" for name in BATCH)


@pytest.mark.parametrize("name", BATCH)
@pytest.mark.parametrize("method", ["decide", "rank"])
def test_a_batch_solver_says_to_use_solve(name, method):
    state = ClusterState(random_problem(1, nodes=4, pods=3))
    with pytest.raises(TypeError, match=rf"^solver '{name}' is a batch solver: use solve\(problem\); {method}\(\) needs an online solver"):
        getattr(solvers.make(name), method)(state, 0)


def test_online_solvers_and_composites_still_decide_rank_and_solve():
    problem = random_problem(2, nodes=6, pods=8)
    state = ClusterState(problem)
    online = solvers.make("greedy-objective", seed=0)
    decision = online.decide(state, 0)
    ranked = online.rank(state, 0, k=3)
    assert decision.node == ranked[0][0] and len(ranked) == 3
    # the composites place the pods their online parts decide, as before
    alone = solvers.make("first-fit").solve(problem)
    budget = solvers.make("time-budget", solver="first-fit", budget_s=60.0, then="best-fit").solve(problem)
    fallback = solvers.make("fallback", primary="first-fit", fallback="best-fit").solve(problem)
    assert budget.assignment.tolist() == alone.assignment.tolist() == fallback.assignment.tolist()
    exhausted = solvers.make("time-budget", solver="first-fit", budget_s=0.0, then="best-fit").solve(problem)
    assert exhausted.assignment.tolist() == solvers.make("best-fit").solve(problem).assignment.tolist()
    assert exhausted.info["finished_by"] == "best-fit"
