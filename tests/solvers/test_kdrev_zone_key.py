"""kube-default's node list is keyed by zone exactly as kube-scheduler's node tree keys it.

Upstream: ``pkg/scheduler/backend/cache/node_tree.go`` ``nodeTree.addNode`` groups nodes by
``GetZoneKey`` (``staging/src/k8s.io/component-helpers/node/topology/helpers.go``), which reads
``failure-domain.beta.kubernetes.io/zone`` (``/region``) first and falls back to
``topology.kubernetes.io/zone`` (``/region``) only when the beta label is absent; ``nodeTree.list``
then takes one node per zone, round-robin, in the order the zones first appeared.
"""

from __future__ import annotations

from typing import Any

import solvers
from iro_fed import problem_from_dict
from solvers.kube_default import num_feasible_nodes_to_find, zone_interleaved_order

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
GA_ZONE = "topology.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
GA_REGION = "topology.kubernetes.io/region"


def problem_with(labels: list[dict[str, str]], allocated: list[dict[str, float]] | None = None, pods: int = 0):
    nodes: list[dict[str, Any]] = [
        {"name": f"n{i:03d}", "domain": "az", "capacity": {"cpu": 4000, "memory": 8192}, "labels": lab}
        for i, lab in enumerate(labels)
    ]
    for node, used in zip(nodes, allocated or [], strict=False):
        node["allocated"] = used
    workloads = [{"name": f"p{j}", "requests": {"cpu": 100, "memory": 100}} for j in range(pods)]
    return problem_from_dict({"domains": [{"name": "az"}], "nodes": nodes, "workloads": workloads})


def test_beta_zone_label_wins_over_the_ga_one():
    # GetZoneKey: n0 "a" (beta beats GA "x"), n1 "a" (GA only), n2 "b" (beta beats GA "a"),
    # n3 "a" (beta only). Zones in order of appearance: a = [n0, n1, n3], b = [n2];
    # nodeTree.list() = [n0, n2, n1, n3]. Reading GA first gave x = [n0], a = [n1, n2, n3]:
    # [n0, n1, n2, n3].
    problem = problem_with([{BETA_ZONE: "a", GA_ZONE: "x"}, {GA_ZONE: "a"}, {BETA_ZONE: "b", GA_ZONE: "a"}, {BETA_ZONE: "a"}])
    assert zone_interleaved_order(problem).tolist() == [0, 2, 1, 3]


def test_beta_region_label_wins_over_the_ga_one():
    # Same zone "z" everywhere; regions by GetZoneKey: n0 "r1" (beta beats GA "r2"), n1 "r1",
    # n2 "r2" -> keys "r1:\x00:z" = [n0, n1], "r2:\x00:z" = [n2]; list() = [n0, n2, n1].
    problem = problem_with([
        {BETA_REGION: "r1", GA_REGION: "r2", GA_ZONE: "z"},
        {BETA_REGION: "r1", GA_ZONE: "z"},
        {GA_REGION: "r2", GA_ZONE: "z"},
    ])
    assert zone_interleaved_order(problem).tolist() == [0, 2, 1]


def test_scan_reaches_the_node_kube_would_reach():
    # 200 nodes: beta zone "a" for n000-n099, "b" for n100-n199; every node also carries a stale
    # GA zone "x". numFeasibleNodesToFind(200) = max(200 * (50 - 200/125) / 100, 100) = 100.
    # Upstream list() interleaves a and b: [n000, n100, n001, n101, ...], so the first pod's scan
    # finds n000-n049 and n100-n149. Every node is half full but n120, which is empty, so it
    # wins on NodeResourcesFit and BalancedAllocation: kube binds the pod to n120. With the GA
    # zone read first all nodes were one zone and the scan saw only n000-n099.
    labels = [{BETA_ZONE: "a" if i < 100 else "b", GA_ZONE: "x"} for i in range(200)]
    allocated = [{} if i == 120 else {"cpu": 2000, "memory": 4096} for i in range(200)]
    problem = problem_with(labels, allocated, pods=1)
    assert num_feasible_nodes_to_find(0, 200) == 100
    for seed in range(5):
        assert solvers.make("kube-default", seed=seed).solve(problem).assignment.tolist() == [120]
