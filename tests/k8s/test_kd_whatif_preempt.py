"""The preempt check's what-if (a node without its victims) carries kube's NonZeroRequested.

``set_node_pods`` gives a node the usage of the pods left on it. Before, the preempt path set
only the usage, and the what-if's NonZeroRequested was then the usage itself: a best-effort pod
left on the node counted 0 instead of kube's 100m / 200 MiB, so kube-default scored the node
as emptier than a fresh snapshot of the same pods. Expected scores are worked out next to them:
LeastAllocated ``(alloc - req) * 100 // alloc`` per resource, then their mean (int64).
"""

from __future__ import annotations

import numpy as np

import solvers
from iro_fed.k8s.extender import set_node_pods
from iro_fed.k8s.snapshot import ClusterModel, build_snapshot
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState
from tests.k8s.helpers import fit_and_balance


def test_a_node_without_its_victims_scores_as_a_snapshot_of_the_pods_left():
    nodes = [make_node("n1", cpu="2", memory="4Gi"), make_node("n2", cpu="2", memory="4Gi")]
    best_effort = make_pod("be", cpu=None, memory=None, node="n1")  # non-zero: 100m / 200 MiB
    victim = make_pod("big", cpu="1", memory="1Gi", node="n1")
    pending = make_pod("p", cpu="500m", memory="512Mi")
    model = ClusterModel(nodes, [best_effort, victim])
    problem = model.with_pods([pending]).problem
    state = ClusterState(problem)
    solver = solvers.make("kube-default")
    solver.reset(problem)
    before = solver.plugin_scores(state, 0, np.arange(2))["NodeResourcesFit"].tolist()
    # n1 with both: cpu (2000 - 1600) * 100 // 2000 = 20, memory (4096 - 1736) * 100 // 4096 = 57 -> 38.
    assert before == [38, 81]
    set_node_pods(state, model, 0, [best_effort])
    expected = fit_and_balance(build_snapshot(nodes, [best_effort], [pending]).problem)
    # n1 with the best-effort pod only: cpu (2000 - 600) * 100 // 2000 = 70, memory
    # (4096 - 712) * 100 // 4096 = 82 -> 76 (81, as the empty n2, when it counted 0).
    assert expected[0] == [76, 81]
    s = solver.plugin_scores(state, 0, np.arange(2))
    assert (s["NodeResourcesFit"].tolist(), s["NodeResourcesBalancedAllocation"].tolist()) == expected
    # The what-if's usage itself is the snapshot's too (requests, cards, non-zero requests).
    fresh = build_snapshot(nodes, [best_effort], [pending]).problem
    np.testing.assert_array_equal(state.allocated, fresh.allocated)
    np.testing.assert_array_equal(state.initial_nonzero, fresh.initial_nonzero)
    # Putting all the pods back restores the problem's scores.
    set_node_pods(state, model, 0, [best_effort, victim])
    assert solver.plugin_scores(state, 0, np.arange(2))["NodeResourcesFit"].tolist() == before
    np.testing.assert_array_equal(state.initial_nonzero, problem.initial_nonzero)
