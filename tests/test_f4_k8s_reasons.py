"""The Kubernetes side of kube-scheduler's wording (snapshot and extender).

* ``spec.unschedulable`` adds the cordon taint once, even when the node lifecycle controller has
  added it already (it was doubled, and the double survived ``problem_to_dict``), and the node is
  "node(s) were unschedulable";
* a required node affinity whose every term has ``matchFields`` ``metadata.name In`` (a DaemonSet
  pod's) reports the nodes outside those names as "node(s) didn't satisfy plugin(s)
  [NodeAffinity]" (NodeAffinity's PreFilter); they were "didn't match Pod's node affinity/selector";
* the extender's per-node reasons say the same as ``explain``: "Too many pods", "Insufficient
  nvidia.com/gpu", "node(s) were unschedulable" (a cordoned node raised KeyError in it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from iro_fed import ClusterState
from iro_fed.feasibility import explain
from iro_fed.k8s.extender import node_reasons
from iro_fed.k8s.snapshot import ClusterConfig, build_snapshot, prefilter_node_names
from iro_fed.problem_io import problem_from_dict, problem_to_dict

CORDON = {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"}


def node(
    name: str, cpu: str = "4", unschedulable: bool = False, taints: list | None = None, **alloc: str
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"disk": "ssd" if name.endswith("1") else "hdd"}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110", **alloc}},
    }


def pod(name: str = "p", cpu: str = "500m", affinity: dict | None = None, limits: dict | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    if limits:
        container["resources"]["limits"] = limits
    spec: dict[str, Any] = {"containers": [container]}
    if affinity:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity}}
        }
    return {"metadata": {"name": name, "namespace": "d"}, "spec": spec}


def by_name(*names: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(names)}]}


# --- cordoned nodes ----------------------------------------------------------------------------


def test_a_cordoned_node_has_one_cordon_taint_and_is_unschedulable() -> None:
    nodes = [node("n1", unschedulable=True), node("n2", unschedulable=True, taints=[CORDON]), node("n3", cpu="100m")]
    snap = build_snapshot(nodes, [], [pod()])
    assert [len(n.taints) for n in snap.problem.nodes] == [1, 1, 0]
    assert problem_to_dict(snap.problem)["nodes"][1]["taints"] == [CORDON]
    assert (
        explain(ClusterState(snap.problem), 0)
        == "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) were unschedulable."
    )
    again = problem_from_dict(problem_to_dict(snap.problem))
    assert explain(ClusterState(again), 0) == explain(ClusterState(snap.problem), 0)


def test_a_cordoned_node_with_another_taint_is_still_unschedulable() -> None:
    batch = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
    snap = build_snapshot([node("n1", unschedulable=True, taints=[batch])], [], [pod()])
    assert explain(ClusterState(snap.problem), 0) == "0/1 nodes are available: 1 node(s) were unschedulable."


# --- NodeAffinity PreFilter --------------------------------------------------------------------


def test_a_daemonset_pod_reports_the_other_nodes_as_not_satisfying_node_affinity() -> None:
    nodes = [node("n1", cpu="100m"), node("n2"), node("n3", unschedulable=True)]
    snap = build_snapshot(nodes, [], [pod("ds-x", affinity=[by_name("n1")])])
    assert explain(ClusterState(snap.problem), 0) == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )


def test_inside_the_named_nodes_the_other_requirements_are_node_affinity_filter_reasons() -> None:
    term = by_name("n1", "n2")
    term["matchExpressions"] = [{"key": "disk", "operator": "In", "values": ["ssd"]}]  # only n1
    snap = build_snapshot([node("n1"), node("n2"), node("n3")], [], [pod(affinity=[term])])
    state = ClusterState(snap.problem)
    assert explain(state, 0) == (
        "1/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )


def test_a_term_without_node_names_lets_every_node_through_the_prefilter() -> None:
    terms = [by_name("n1"), {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]}]
    snap = build_snapshot([node("n1", cpu="100m"), node("n2")], [], [pod(affinity=terms)])
    assert explain(ClusterState(snap.problem), 0) == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector."
    )


def test_names_of_no_node_in_the_cluster_leave_every_node_outside() -> None:
    snap = build_snapshot([node("n1"), node("n2")], [], [pod(affinity=[by_name("gone")])])
    assert (
        explain(ClusterState(snap.problem), 0)
        == "0/2 nodes are available: 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )


def test_prefilter_node_names_is_upstreams_union_of_intersections() -> None:
    def req(op: str, *values: str) -> tuple:
        return (True, "metadata.name", op, values)

    assert prefilter_node_names([[req("In", "a", "b"), req("In", "b", "c")], [req("In", "d")]]) == {"b", "d"}
    assert prefilter_node_names([[req("In", "a")], [req("NotIn", "a")]]) is None  # a term without In: all nodes
    assert prefilter_node_names([[req("In", "a"), (False, "disk", "In", ("ssd",))]]) == {"a"}
    assert prefilter_node_names([[req("In", "a"), req("In", "b")]]) == set()  # upstream: "pod affinity terms conflict"
    assert prefilter_node_names([]) is None


# --- the extender's words ----------------------------------------------------------------------


def test_the_extender_says_what_explain_says() -> None:
    cfg = ClusterConfig.from_dict({"resources": ["cpu", "memory", "pods"]})
    nodes = [node("n1", unschedulable=True), node("n2", pods="1"), node("n3", **{"nvidia.com/gpu": "1"}), node("n4")]
    bound = [
        {
            "metadata": {"name": "b", "namespace": "d"},
            "spec": {"nodeName": "n2", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }
    ]
    snap = build_snapshot(nodes, bound, [pod(limits={"nvidia.com/gpu": "2"})], cfg)
    reasons = node_reasons(ClusterState(snap.problem), 0, np.arange(4))
    assert reasons == {
        0: ("node(s) were unschedulable", True),
        1: ("Too many pods, Insufficient nvidia.com/gpu", True),
        2: ("Insufficient nvidia.com/gpu", True),
        3: ("Insufficient nvidia.com/gpu", True),
    }
    assert explain(ClusterState(snap.problem), 0) == (
        "0/4 nodes are available: 1 Too many pods, 1 node(s) were unschedulable, 3 Insufficient nvidia.com/gpu."
    )
