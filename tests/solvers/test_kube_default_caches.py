"""kube-default's per-node caches and usage reading stay exact over a run, what-ifs and odd nodes.

Each expected score is worked out next to it: LeastAllocated ``(alloc - req) * 100 // alloc`` per
resource with allocatable > 0, then their mean (int64); BalancedAllocation
``int64((1 - |f_cpu - f_mem| / 2) * 100)`` over the resources with allocatable > 0 (std 0 with one).
"""

from __future__ import annotations

import numpy as np

import solvers
from iro_fed import ClusterState, problem_from_dict
from iro_fed.k8s.snapshot import build_snapshot
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.problem_io import problem_to_dict
from tests.k8s.helpers import fit_and_balance
from tests.solvers.test_kd_whatif_scores import fit_and_balance as scores
from tests.solvers.test_kube_default_rounding import MIB, cluster


def test_one_solver_over_a_run_scores_fractional_pods_as_a_fresh_one():
    # The solver's caches start from a state with nothing placed (every solve does). Before, the
    # placed pods' summed demand was then an int64 array (numpy's bincount of no weights), each
    # placement's 100.5m was truncated to 100m in it, and the node's own usage came out as
    # 100.5 - 100 = 0.5 -> 1m: the pod of 99m saw 1 + 101 + 99 = 201m -> 79, not 80.
    problem = cluster([{"name": "n", "capacity": {"cpu": 1000}}],
                      [{"name": "a", "requests": {"cpu": 100.5}}, {"name": "b", "requests": {"cpu": 0.4}},
                       {"name": "p", "requests": {"cpu": 99}}], ["cpu"])
    solver = solvers.make("kube-default")
    solver.reset(problem)
    state = ClusterState(problem)
    assert scores(solver, state, 2)[0] == [90]  # (1000 - 99) * 100 // 1000
    state.place(0, 0)
    # 101m + 99m: (1000 - 200) * 100 // 1000 = 80.
    assert scores(solver, state, 2)[0] == [80]
    state.place(1, 0)
    # 101m + 1m (0.4m rounds up) + 99m: (1000 - 201) * 100 // 1000 = 79.
    assert scores(solver, state, 2)[0] == [79]
    state.remove(0)
    assert scores(solver, state, 2)[0] == [90]  # 1m + 99m
    fresh = solvers.make("kube-default")
    fresh.reset(problem)
    assert scores(fresh, state, 2) == scores(solver, state, 2)


def test_a_fractional_what_if_usage_rounds_up_on_a_whole_problem():
    # The extender's what-if (ClusterState.set_node_usage) gives a node another usage. On a
    # problem of whole numbers it was read to the nearest millicore (4.2m -> 4m: (10 - 5) * 100
    # // 10 = 50); it rounds up as the same usage in the problem does: 5m -> (10 - 6) * 100 // 10 = 40.
    problem = cluster([{"name": "n", "capacity": {"cpu": 10}}], [{"name": "p", "requests": {"cpu": 1}}], ["cpu"])
    solver = solvers.make("kube-default")
    solver.reset(problem)
    state = ClusterState(problem)
    state.set_node_usage(0, np.array([4.2]), problem.gpu_free[0])
    assert scores(solver, state, 0)[0] == [40]
    same = cluster([{"name": "n", "capacity": {"cpu": 10}, "allocated": {"cpu": 4.2}}], [{"name": "p", "requests": {"cpu": 1}}], ["cpu"])
    assert fit_and_balance(same)[0] == [40]
    state.set_node_usage(0, problem.allocated[0], problem.gpu_free[0])
    assert scores(solver, state, 0)[0] == [90]


def test_a_node_with_no_allocatable_cpu_is_modelled_and_scored_as_upstream():
    # A node reporting allocatable cpu 0 (all of it reserved) still takes pods without a cpu
    # request. Before, the snapshot gave it a capacity of 1e-9, below the problem's smallest
    # (1e-6): building the cluster model failed for every pod. kube-default then must read the
    # stand-in as 0, not round it up to 1m (upstream leaves cpu out of both scores there).
    nodes = [make_node("zero", cpu="0", memory="4Gi"), make_node("n2", cpu="2", memory="4Gi")]
    pods = [make_pod("mem", cpu=None, memory="512Mi"), make_pod("cpu", cpu="100m", memory="512Mi")]
    snap = build_snapshot(nodes, [], pods).problem
    # "mem" (non-zero cpu 100m, memory 512Mi): on "zero" only memory scores: (4096 - 512) * 100
    # // 4096 = 87, balanced on one fraction: 100. On n2 cpu (2000 - 100) * 100 // 2000 = 95
    # -> (95 + 87) // 2 = 91; balanced f_cpu 0, f_mem 0.125: (1 - 0.0625) * 100 -> 93.
    assert fit_and_balance(snap, 0) == ([87, 91], [100, 93])
    placement = solvers.make("kube-default").solve(snap)
    assert placement.assignment.tolist() == [0, 1]  # "cpu" fits only on n2
    # The same cluster as a problem file scores the same.
    again = problem_from_dict(problem_to_dict(snap))
    assert fit_and_balance(again, 0) == fit_and_balance(snap, 0)
    assert fit_and_balance(again, 1) == fit_and_balance(snap, 1)


def test_placed_requests_add_up_exactly_past_2_to_the_53_bytes():
    # A node's NonZeroRequested is an int64 sum upstream. The caches rebuilt from a state summed
    # the placed pods' bytes in float64 (bincount), where 2**53 + 1 is 2**53: a solver started on
    # that state scored one byte less than one that saw the pods placed. Allocatable
    # 1e10 MiB = C = 10,485,760,000,000,000 bytes; placed 2**53 + 1 bytes, the pending pod's
    # request chosen so that the node's request is 0.86 C + 1: memory (C - R) * 100 // C = 13
    # (14 at 0.86 C); cpu 1 + 1 + 10m: (1000 - 12) * 100 // 1000 = 98 -> (98 + 13) // 2 = 55 (56 at 14).
    cap = 10**10 * MIB
    pending = cap * 86 // 100 + 1 - (2**53 + 1)
    wls = [{"name": n, "requests": {"cpu": 1, "memory": m}, "nonzero_requests": {"cpu": 1, "memory": m}}
           for n, m in (("big", 2**33), ("byte", 1 / MIB), ("p", pending / MIB))]
    wls[2]["requests"]["cpu"] = wls[2]["nonzero_requests"]["cpu"] = 10
    problem = cluster([{"name": "n", "capacity": {"cpu": 1000, "memory": 1e10}, "nonzero_allocated": {"cpu": 0, "memory": 0}}], wls)
    state = ClusterState(problem)
    state.place(0, 0)
    state.place(1, 0)
    fresh = solvers.make("kube-default")
    fresh.reset(problem)
    assert scores(fresh, state, 2)[0] == [55]
