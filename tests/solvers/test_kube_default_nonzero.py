"""kube-default's NonZeroRequested from real pod / node JSON (the Kubernetes snapshot).

kube-scheduler scores NodeResourcesFit with ``NonZeroRequested``: per container, a *missing*
cpu / memory request counts 100m / 200 MiB (``calculateResource`` / ``PodRequests`` with
``NonMissingContainerRequests``), an explicit 0 stays 0, and the pods already bound to a node
count the same way. Each expected number is worked out by hand next to it: LeastAllocated
``(alloc - req) * 100 // alloc`` per resource, then their mean (int64); BalancedAllocation
``int64((1 - |f_cpu - f_mem| / 2) * 100)`` on the *actual* requests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import solvers
from iro_fed.k8s.snapshot import build_snapshot
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState
from tests.k8s.helpers import fit_and_balance

# 2000m cpu, 4096 MiB memory: 100m is 5 points of cpu share, 200 MiB 4.9 points of memory.
NODE = {"cpu": "2", "memory": "4Gi"}


def nodes(*names: str) -> list[dict[str, Any]]:
    return [make_node(n, **NODE) for n in names]


def pod_with(name: str, containers: list[dict[str, Any]], node: str | None = None) -> dict[str, Any]:
    pod = make_pod(name, node=node)
    pod["spec"]["containers"] = [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(containers)]
    return pod


def test_bound_best_effort_pod_holds_100m_and_200mib_on_its_node():
    bound = [make_pod("old", cpu=None, memory=None, node="n1")]
    snap = build_snapshot(nodes("n1", "n2"), bound, [make_pod("new", cpu=None, memory=None)])
    assert snap.problem.initial_nonzero.tolist() == [[100.0, 200.0], [0.0, 0.0]]
    # n1: cpu (2000 - 100 - 100) * 100 // 2000 = 90, memory (4096 - 400) * 100 // 4096 = 90 -> 90;
    # n2: cpu 1900 -> 95, memory 3896 * 100 // 4096 = 95 -> 95. Best-effort: balance skipped (0).
    # (Counting the bound pod as 0, n1 tied n2 at 95.)
    assert fit_and_balance(snap.problem) == ([90, 95], [0, 0])


def test_two_best_effort_pods_spread_past_the_node_holding_one():
    # n1 holds a best-effort pod: kube puts the first new one on n2 or n3 (95 each, n1 90) and
    # the second on the other empty node (95 vs 90 and 90). Never on n1.
    bound = [make_pod("old", cpu=None, memory=None, node="n1")]
    pending = [make_pod("a", cpu=None, memory=None), make_pod("b", cpu=None, memory=None)]
    problem = build_snapshot(nodes("n1", "n2", "n3"), bound, pending).problem
    seen = set()
    for seed in range(20):
        assignment = solvers.make("kube-default", seed=seed).solve(problem).assignment.tolist()
        assert sorted(assignment) == [1, 2], (seed, assignment)
        seen.add(tuple(assignment))
    assert seen == {(1, 2), (2, 1)}  # the first pod's tie is still drawn


def test_bound_pod_missing_memory_counts_for_fit_but_not_for_balance():
    # n1 holds a pod asking cpu 1 and no memory: Requested (1000m, 0), NonZeroRequested
    # (1000m, 200 MiB). The new pod asks 500m / 1Gi.
    bound = [make_pod("old", cpu="1", memory=None, node="n1")]
    problem = build_snapshot(nodes("n1", "n2"), bound, [make_pod("new", cpu="500m", memory="1Gi")]).problem
    # Fit n1: cpu (2000 - 1500) * 100 // 2000 = 25, memory (4096 - 200 - 1024) * 100 // 4096 =
    # 70 -> (25 + 70) // 2 = 47 (50 when the bound pod counted 0 memory); n2: 75, 75 -> 75.
    # Balance n1: f_cpu 1500 / 2000 = 0.75, f_mem 1024 / 4096 = 0.25 -> (1 - 0.25) * 100 = 75;
    # n2: 0.25, 0.25 -> 100.
    assert fit_and_balance(problem) == ([47, 75], [75, 100])
    solver = solvers.make("kube-default")
    solver.reset(problem)
    # Weighted: taint 3 * 100 + affinity 0 + fit + balance.
    assert solver.score(ClusterState(problem), 0, np.arange(2)).tolist() == [300 + 47 + 75, 300 + 75 + 100]


def test_explicit_zero_cpu_scores_zero_and_missing_cpu_scores_100m():
    pending = [pod_with("zero", [{"cpu": "0", "memory": "1Gi"}]), pod_with("missing", [{"memory": "1Gi"}])]
    problem = build_snapshot(nodes("n1"), [], pending).problem
    assert problem.nonzero_demand.tolist() == [[0.0, 1024.0], [100.0, 1024.0]]
    # zero: cpu (2000 - 0) -> 100, memory (4096 - 1024) -> 75 -> 87; missing: cpu 1900 -> 95 -> 85.
    assert fit_and_balance(problem, 0)[0] == [87]
    assert fit_and_balance(problem, 1)[0] == [85]


def test_bound_pod_with_explicit_zero_requests_holds_nothing():
    bound = [pod_with("zero", [{"cpu": "0", "memory": "0"}], node="n1")]
    problem = build_snapshot(nodes("n1", "n2"), bound, [make_pod("new", cpu=None, memory=None)]).problem
    assert problem.initial_nonzero.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert fit_and_balance(problem)[0] == [95, 95]


def test_two_container_pod_with_one_missing_cpu_request_gets_100m_more():
    pending = [pod_with("two", [{"cpu": "200m", "memory": "256Mi"}, {"memory": "128Mi"}])]
    problem = build_snapshot(nodes("n1"), [], pending).problem
    assert problem.demand[0].tolist() == [200.0, 384.0]
    assert problem.nonzero_demand.tolist() == [[300.0, 384.0]]
    # cpu (2000 - 300) * 100 // 2000 = 85, memory (4096 - 384) * 100 // 4096 = 90 -> 87
    # (90 when the one number 200m stood for the whole pod). Balance on the actual 200m:
    # f_cpu 0.1, f_mem 0.09375 -> (1 - 0.003125) * 100 = 99.6875 -> 99.
    assert fit_and_balance(problem) == ([87], [99])


def test_placed_pods_add_their_exact_non_zero_request():
    # The first pending pod (200m / 512Mi and a container with 512Mi but no cpu: actual 200m,
    # non-zero 300m) placed on n1 adds 300m / 1Gi to n1's NonZeroRequested; the second pod
    # (500m / 1Gi) then scores n1: cpu (2000 - 800) * 100 // 2000 = 60, memory (4096 - 2048) -> 50
    # -> 55 (57 when the placed pod added its 200m only); n2: 75, 75 -> 75.
    pending = [pod_with("a", [{"cpu": "200m", "memory": "512Mi"}, {"memory": "512Mi"}]), make_pod("b", cpu="500m", memory="1Gi")]
    problem = build_snapshot(nodes("n1", "n2"), [], pending).problem
    solver = solvers.make("kube-default")
    solver.reset(problem)
    state = ClusterState(problem)
    state.place(0, 0)
    assert solver.plugin_scores(state, 1, np.arange(2))["NodeResourcesFit"].tolist() == [55, 75]
    state.remove(0)  # a departure takes it away again
    assert solver.plugin_scores(state, 1, np.arange(2))["NodeResourcesFit"].tolist() == [75, 75]
