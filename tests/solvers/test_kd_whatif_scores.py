"""kube-default honours a what-if's NonZeroRequested (``ClusterState.set_node_usage``).

A what-if gives a node another usage and another NonZeroRequested (the state's own
``initial_nonzero``). kube-default took the NonZeroRequested base from the problem once per run,
so after a what-if it still scored NodeResourcesFit with the pods the node no longer holds. Each
expected score is worked out next to it: LeastAllocated ``(alloc - req) * 100 // alloc`` per
resource, then their mean (int64); BalancedAllocation ``int64((1 - |f_cpu - f_mem| / 2) * 100)``
on the actual requests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import solvers
from iro_fed import ClusterState, problem_from_dict

# Two nodes of 2000m / 4096 MiB; node "a" holds 1000m / 1024 MiB (its non-zero requests the same).
HELD = {"cpu": 1000, "memory": 1024}
PENDING = [{"name": "p", "requests": {"cpu": 500, "memory": 512}, "nonzero_requests": {"cpu": 500, "memory": 512}},
           {"name": "q", "requests": {"cpu": 300, "memory": 256}, "nonzero_requests": {"cpu": 300, "memory": 256}}]


def problem(a_allocated: dict[str, float], a_nonzero: dict[str, float]):
    node: dict[str, Any] = {"domain": "az", "capacity": {"cpu": 2000, "memory": 4096}}
    nodes = [dict(node, name="a", allocated=a_allocated, nonzero_allocated=a_nonzero),
             dict(node, name="b", allocated={"cpu": 0, "memory": 0}, nonzero_allocated={"cpu": 0, "memory": 0})]
    return problem_from_dict({"domains": [{"name": "az"}], "resources": ["cpu", "memory"], "nodes": nodes,
                              "workloads": PENDING})


def fit_and_balance(solver, state: ClusterState, w: int = 0) -> tuple[list[int], list[int]]:
    s = solver.plugin_scores(state, w, np.arange(state.problem.num_nodes))
    return s["NodeResourcesFit"].tolist(), s["NodeResourcesBalancedAllocation"].tolist()


def fresh_scores(p, placed: dict[int, int], w: int = 0) -> tuple[list[int], list[int]]:
    """The scores of a new solver on a new state of ``p`` with ``placed`` (workload -> node)."""
    state = ClusterState(p)
    for pod, node in placed.items():
        state.place(pod, node)
    solver = solvers.make("kube-default")
    solver.reset(p)
    return fit_and_balance(solver, state, w)


def test_a_what_if_nonzero_is_scored_as_a_fresh_problem_with_it():
    base = problem(HELD, HELD)
    solver = solvers.make("kube-default")
    solver.reset(base)
    state = ClusterState(base)
    # Scored once first: the solver's caches are warm when the what-if comes.
    # a: cpu (2000 - 1500) * 100 // 2000 = 25, memory (4096 - 1536) * 100 // 4096 = 62 -> 43;
    # b: cpu 75, memory (4096 - 512) * 100 // 4096 = 87 -> 81. Balanced a: |0.75 - 0.375| / 2
    # -> 81; b: |0.25 - 0.125| / 2 -> 93.
    assert fit_and_balance(solver, state) == ([43, 81], [81, 93])
    # What-if: "a" without its big pod, holding only a best-effort one (0 requested, 100m / 200 MiB non-zero).
    state.set_node_usage(0, np.array([0.0, 0.0]), base.gpu_free[0], nonzero=np.array([100.0, 200.0]))
    # a: cpu (2000 - 600) * 100 // 2000 = 70, memory (4096 - 712) * 100 // 4096 = 82 -> 76
    # (before, still the old 1000m / 1024 MiB: 43). Balanced on the actual usage: 0.25 vs 0.125 -> 93.
    expected = fresh_scores(problem({"cpu": 0, "memory": 0}, {"cpu": 100, "memory": 200}), {})
    assert expected == ([76, 81], [93, 93])
    assert fit_and_balance(solver, state) == expected
    # Put back: the problem's non-zero requests again.
    state.set_node_usage(0, base.allocated[0], base.gpu_free[0])
    assert fit_and_balance(solver, state) == ([43, 81], [81, 93])


def test_a_what_if_without_nonzero_scores_its_usage_as_nonzero_and_keeps_placed_pods():
    base = problem(HELD, HELD)
    solver = solvers.make("kube-default")
    solver.reset(base)
    state = ClusterState(base)
    state.place(1, 1)  # q on b: its non-zero request stays on b's NonZeroRequested through the rebuild
    assert fit_and_balance(solver, state) == fresh_scores(base, {1: 1})
    # No nonzero= given: the new usage (300m / 2048 MiB) is the node's non-zero requests too.
    state.set_node_usage(0, np.array([300.0, 2048.0]), base.gpu_free[0])
    # a: cpu (2000 - 800) * 100 // 2000 = 60, memory (4096 - 2560) * 100 // 4096 = 37 -> 48 (43 before);
    # b: cpu (2000 - 800) -> 60, memory (4096 - 768) * 100 // 4096 = 81 -> 70.
    expected = fresh_scores(problem({"cpu": 300, "memory": 2048}, {"cpu": 300, "memory": 2048}), {1: 1})
    assert expected[0] == [48, 70]
    assert fit_and_balance(solver, state) == expected


def test_decide_after_a_what_if_sees_the_freed_node():
    # Node "a" at 1000m / 1024 MiB loses to the empty "b"; emptied by a what-if to the same usage
    # and non-zero requests as "b", the two tie, as in a fresh problem (the draw is seeded).
    base = problem(HELD, HELD)
    state = ClusterState(base)
    solver = solvers.make("kube-default", seed=0)
    assert solver.decide(state, 0).node == 1
    state.set_node_usage(0, np.array([0.0, 0.0]), base.gpu_free[0], nonzero=np.array([0.0, 0.0]))
    empty = problem({"cpu": 0, "memory": 0}, {"cpu": 0, "memory": 0})
    assert fresh_scores(empty, {}) == ([81, 81], [93, 93])
    s = solver.plugin_scores(state, 0, np.arange(2))
    assert s["NodeResourcesFit"].tolist() == [81, 81]
    picks = {solvers.make("kube-default", seed=seed).decide(state, 0).node for seed in range(16)}
    assert picks == {0, 1}
