"""kube-default against kube-scheduler's own arithmetic, computed by hand on small clusters.

Each expected number is worked out in the comment next to it from the upstream formulas
(kubernetes/kubernetes ``pkg/scheduler/framework/plugins``): ``leastRequestedScore``
``(alloc - req) * 100 / alloc`` in int64 per resource, then the weighted sum divided by the
weight sum (int64 again); BalancedAllocation ``int64((1 - |f_cpu - f_mem| / 2) * 100)`` in float64
on the *actual* requests; ``DefaultNormalizeScore`` ``100 * s / max`` in int64 (reversed for
TaintToleration); plugin weights TaintToleration 3, NodeAffinity 2, Fit 1, Balanced 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import solvers
from iro_fed import ClusterState, problem_from_dict


def cluster(nodes: list[dict[str, Any]], workloads: list[dict[str, Any]], resources: list[str] | None = None):
    doc: dict[str, Any] = {
        "domains": [{"name": "az"}],
        "nodes": [dict({"domain": "az"}, **n) for n in nodes],
        "workloads": workloads,
    }
    if resources is not None:
        doc["resources"] = resources
    return problem_from_dict(doc)


def scores_of(problem, w: int = 0, state: ClusterState | None = None, solver=None) -> dict[str, list[int]]:
    solver = solver or solvers.make("kube-default")
    solver.reset(problem)
    state = state or ClusterState(problem)
    out = solver.plugin_scores(state, w, np.arange(problem.num_nodes))
    return {k: v.tolist() for k, v in out.items()}


def test_least_allocated_truncates_per_resource_before_averaging():
    # cpu: (1000 - 494) * 100 / 1000 = 50.6 -> 50; memory: (1000 - 484) * 100 / 1000 = 51.6 -> 51;
    # (50 + 51) / 2 = 50.5 -> 50. Averaging the exact shares would give 51.1 -> 51.
    problem = cluster(
        [{"name": "n", "capacity": {"cpu": 1000, "memory": 1000}}],
        [{"name": "p", "requests": {"cpu": 494, "memory": 484}}],
    )
    assert scores_of(problem)["NodeResourcesFit"] == [50]


def test_balanced_allocation_is_float64_truncated_like_go():
    # f_cpu = 680 / 1000 = 0.68, f_mem = 0: std = 0.34; in float64 (1 - 0.34) * 100 is
    # 65.99999999999999, and int64() truncates to 65 (exact arithmetic would say 66).
    # f_cpu = 0.68, f_mem = 500 / 1000 = 0.5: std 0.09 -> 90.99999999999999 -> 90 (not 91).
    problem = cluster(
        [{"name": "n1", "capacity": {"cpu": 1000, "memory": 1000}},
         {"name": "n2", "capacity": {"cpu": 1000, "memory": 1000}, "allocated": {"memory": 500}}],
        [{"name": "p", "requests": {"cpu": 680}}],
    )
    assert scores_of(problem)["NodeResourcesBalancedAllocation"] == [65, 90]


def test_full_cpu_node_scores_zero_cpu_for_fit_and_full_fraction_for_balance():
    # The pod asks memory only, so it passes the filter on a node whose cpu is all requested.
    # Fit (non-zero): cpu 2000 + 100m default > 2000 -> 0 (requested > allocatable);
    # memory (1024 - 512) * 100 / 1024 = 50 -> (0 + 50) / 2 = 25.
    # Balanced (actual): cpu 2000 / 2000 = 1, memory 0.5 -> std 0.25 -> 75.
    problem = cluster(
        [{"name": "n1", "capacity": {"cpu": 2000, "memory": 1024}, "allocated": {"cpu": 2000}}],
        [{"name": "p", "requests": {"memory": 512}}],
    )
    scores = scores_of(problem)
    assert scores["NodeResourcesFit"] == [25]
    assert scores["NodeResourcesBalancedAllocation"] == [75]
    assert solvers.make("kube-default").solve(problem).assignment.tolist() == [0]


def test_missing_memory_request_counts_200mib_for_fit_but_not_for_balance():
    # The pod requests cpu only. Fit (non-zero requests): cpu (4000 - 1000) * 100 / 4000 = 75;
    # memory (8192 - 200) MiB * 100 / 8192 MiB = 97.55 -> 97; (75 + 97) / 2 = 86.
    # Balanced (actual requests): cpu 0.25, memory 0 -> std 0.125 -> 87.5 -> 87 (not skipped:
    # the pod requests cpu, so it is not best-effort).
    problem = cluster(
        [{"name": "n", "capacity": {"cpu": 4000, "memory": 8192}}],
        [{"name": "p", "requests": {"cpu": 1000}}],
    )
    scores = scores_of(problem)
    assert scores["NodeResourcesFit"] == [86]
    assert scores["NodeResourcesBalancedAllocation"] == [87]


def test_extended_resources_do_not_score_by_default():
    # NodeResourcesFit and BalancedAllocation score cpu and memory only (the default
    # ``resources`` of their args): a node with far more of the pod's extended resource left
    # scores the same. Both nodes: cpu (4000 - 1000) * 100 / 4000 = 75, memory 75 -> 75;
    # balanced 0.25 / 0.25 -> 100.
    problem = cluster(
        [{"name": "n1", "capacity": {"cpu": 4000, "memory": 4096, "example.com/fpga": 2}},
         {"name": "n2", "capacity": {"cpu": 4000, "memory": 4096, "example.com/fpga": 100}}],
        [{"name": "p", "requests": {"cpu": 1000, "memory": 1024, "example.com/fpga": 2}}],
        resources=["cpu", "memory", "example.com/fpga"],
    )
    scores = scores_of(problem)
    assert scores["NodeResourcesFit"] == [75, 75]
    assert scores["NodeResourcesBalancedAllocation"] == [100, 100]


def test_prefer_no_schedule_count_normalized_reverse_with_truncation():
    # Intolerable PreferNoSchedule taints [0, 1, 3, 1]; max 3: 100 - 100 * c / 3 in int64 ->
    # [100, 100 - 33, 100 - 100, 100 - 33] = [100, 67, 0, 67]. On n4 the NoSchedule taint is
    # tolerated (filter) and does not count; its PreferNoSchedule taint "b" is not tolerated by
    # the NoSchedule-only toleration. The empty-effect toleration of "c" tolerates every effect.
    pns = [{"key": k, "value": "x", "effect": "PreferNoSchedule"} for k in ("a", "b", "d")]
    problem = cluster(
        [{"name": "n1", "capacity": {"cpu": 1000, "memory": 1000}},
         {"name": "n2", "capacity": {"cpu": 1000, "memory": 1000}, "taints": pns[:1]},
         {"name": "n3", "capacity": {"cpu": 1000, "memory": 1000},
          "taints": [*pns, {"key": "c", "value": "x", "effect": "PreferNoSchedule"}]},
         {"name": "n4", "capacity": {"cpu": 1000, "memory": 1000},
          "taints": [pns[1], {"key": "ded", "value": "x", "effect": "NoSchedule"}]}],
        [{"name": "p", "requests": {"cpu": 100, "memory": 100},
          "tolerations": [{"key": "ded", "operator": "Exists", "effect": "NoSchedule"},
                          {"key": "b", "operator": "Exists", "effect": "NoSchedule"},
                          {"key": "c", "operator": "Exists"}]}],
    )
    assert scores_of(problem)["TaintToleration"] == [100, 67, 0, 67]


def test_preferred_node_affinity_sums_weights_and_normalizes_with_truncation():
    # Terms: zone=a weight 1, disk=ssd weight 2. Raw [1, 2, 3, 0]; max 3: 100 * s / 3 ->
    # [33, 66, 100, 0].
    problem = cluster(
        [{"name": "n1", "capacity": {"cpu": 1000, "memory": 1000}, "labels": {"zone": "a"}},
         {"name": "n2", "capacity": {"cpu": 1000, "memory": 1000}, "labels": {"disk": "ssd"}},
         {"name": "n3", "capacity": {"cpu": 1000, "memory": 1000}, "labels": {"zone": "a", "disk": "ssd"}},
         {"name": "n4", "capacity": {"cpu": 1000, "memory": 1000}, "labels": {"zone": "b"}}],
        [{"name": "p", "requests": {"cpu": 100, "memory": 100},
          "preferred_node_affinity": [{"weight": 1, "match_labels": {"zone": "a"}},
                                      {"weight": 2, "match_labels": {"disk": "ssd"}}]}],
    )
    assert scores_of(problem)["NodeAffinity"] == [33, 66, 100, 0]


def test_empty_preferred_term_matches_no_node():
    # nodeaffinity.NewPreferredSchedulingTerms skips a term with an empty preference: it adds
    # nothing on any node. Raw scores [10, 0] -> [100, 0]; counting the empty term on every node
    # would give raw [60, 50] -> [100, 83].
    problem = cluster(
        [{"name": "n1", "capacity": {"cpu": 1000, "memory": 1000}, "labels": {"zone": "a"}},
         {"name": "n2", "capacity": {"cpu": 1000, "memory": 1000}, "labels": {"zone": "b"}}],
        [{"name": "p", "requests": {"cpu": 100, "memory": 100},
          "preferred_node_affinity": [{"weight": 50, "match_labels": {}},
                                      {"weight": 10, "match_labels": {"zone": "a"}}]}],
    )
    assert scores_of(problem)["NodeAffinity"] == [100, 0]
    only_empty = cluster(
        [{"name": "n1", "capacity": {"cpu": 1000, "memory": 1000}}],
        [{"name": "p", "requests": {"cpu": 100, "memory": 100}, "preferred_node_affinity": [{"weight": 50}]}],
    )
    assert scores_of(only_empty)["NodeAffinity"] == [0]


def best_effort_pair():
    node = {"capacity": {"cpu": 8000, "memory": 16384}}
    return cluster(
        [dict(node, name="n1"), dict(node, name="n2")],
        [{"name": "p0", "requests": {}}, {"name": "p1", "requests": {}}],
    )


def test_placed_best_effort_pod_counts_non_zero_request_on_its_node():
    # NodeInfo.NonZeroRequested grows by 100m / 200 MiB for each pod without a request. After p0
    # lands on n1, p1 scores: n1 cpu (8000 - 200) * 100 / 8000 = 97.5 -> 97, memory
    # (16384 - 400) * 100 / 16384 = 97.56 -> 97 -> 97; n2 cpu 98.75 -> 98, memory 98.78 -> 98 -> 98.
    problem = best_effort_pair()
    solver = solvers.make("kube-default")
    state = ClusterState(problem)
    state.place(0, 0)
    assert scores_of(problem, 1, state, solver)["NodeResourcesFit"] == [97, 98]
    # A departure takes the non-zero request away again.
    state.remove(0)
    assert solver.plugin_scores(state, 1, np.arange(2))["NodeResourcesFit"].tolist() == [98, 98]
    # A copy of the state (a different object) is read from its assignment.
    state.place(0, 1)
    copy = state.copy()
    assert solver.plugin_scores(copy, 1, np.arange(2))["NodeResourcesFit"].tolist() == [98, 97]


def test_best_effort_pods_spread_like_kube():
    # The first pod ties (random node); the second always goes to the other node (98 > 97).
    problem = best_effort_pair()
    for seed in range(20):
        first, second = solvers.make("kube-default", seed=seed).solve(problem).assignment.tolist()
        assert first != second, seed


def test_weighted_total_decides_against_least_allocated():
    # n1 (taint, empty): taint 0, fit cpu/mem 90 -> 90, balanced 100 -> 0*3 + 90 + 100 = 190.
    # n2 (no taint, half full): fit cpu (1000-600)*100/1000 = 40, memory 40 -> 40;
    # balanced 100 -> 3*100 + 40 + 100 = 440. kube picks n2 despite the free node.
    problem = cluster(
        [{"name": "n1", "capacity": {"cpu": 1000, "memory": 1000},
          "taints": [{"key": "spot", "value": "1", "effect": "PreferNoSchedule"}]},
         {"name": "n2", "capacity": {"cpu": 1000, "memory": 1000}, "allocated": {"cpu": 500, "memory": 500}}],
        [{"name": "p", "requests": {"cpu": 100, "memory": 100}}],
    )
    solver = solvers.make("kube-default")
    solver.reset(problem)
    assert solver.score(ClusterState(problem), 0, np.arange(2)).tolist() == [190, 440]
    assert solvers.make("kube-default").solve(problem).assignment.tolist() == [1]
