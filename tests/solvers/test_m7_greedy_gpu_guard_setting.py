"""greedy-objective's `gpu_guard` setting: on by default (the guard ranks stranding nodes last);
false is the plain argmax of R, for callers that need the decision rate more than the guard."""

from __future__ import annotations

import solvers
from iro_fed.model import ClusterState
from iro_fed.objective import marginal
from iro_fed.testing import random_problem


def _gpu_problem():
    for seed in range(40):
        p = random_problem(seed, nodes=6, pods=12)
        if p.has_gpus:
            return p
    raise AssertionError("no GPU problem among seeds 0-39")


def test_the_guard_is_on_by_default_and_off_on_request():
    p = _gpu_problem()
    assert solvers.make("greedy-objective").get_params()["gpu_guard"] is True
    on, off = solvers.make("greedy-objective"), solvers.make("greedy-objective", gpu_guard=False)
    on.reset(p)
    off.reset(p)
    assert on.guard is not None and off.guard is None


def test_without_the_guard_each_decision_is_the_argmax_of_the_marginal():
    p = _gpu_problem()
    solver = solvers.make("greedy-objective", gpu_guard=False)
    state = ClusterState(p)
    solver.reset(p)
    for w in range(p.num_workloads):
        d = solver.decide(state, w)
        cand = solver.candidates(state, w)
        if d.node < 0:
            assert cand.size == 0
            continue
        gains = marginal(p, state, w, cand)
        assert gains[list(cand).index(d.node)] >= gains.max() - 1e-9 * max(1.0, abs(gains.max()))
        state.place(w, d.node)
