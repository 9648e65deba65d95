"""The problem-file side of the cordon: ``iro-fed.io/unschedulable`` (what the Kubernetes snapshot
sets from ``spec.unschedulable``) decides when present; without it the unschedulable taint is
still read as a cordon (problem files have no ``spec.unschedulable``)."""

from __future__ import annotations

from typing import Any

from iro_fed import ClusterState, problem_from_dict
from iro_fed.feasibility import UNSCHEDULABLE_FILTER, UNSCHEDULABLE_LABEL, explain, feasible_nodes, static_filter

CORDON = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def node(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "domain": "d", "capacity": {"cpu": 4000, "memory": 8192}, **extra}


def test_the_label_decides_and_the_taint_alone_is_still_a_cordon() -> None:
    p = problem_from_dict({
        "domains": [{"name": "d"}],
        "nodes": [
            node("taint-only", taints=[CORDON]),
            node("label-true", labels={UNSCHEDULABLE_LABEL: "true"}),
            node("label-false", labels={UNSCHEDULABLE_LABEL: "false"}, taints=[CORDON]),
            node("label-other", labels={UNSCHEDULABLE_LABEL: "yes"}),
        ],
        "workloads": [{"name": "p", "requests": {"cpu": 500}}],
    })
    assert static_filter(p, 0).first_fail.tolist()[:2] == [UNSCHEDULABLE_FILTER] * 2
    assert feasible_nodes(ClusterState(p), 0).tolist() == [False, False, False, True]
    assert explain(ClusterState(p), 0) == (
        "1/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unschedulable: }, "
        "2 node(s) were unschedulable."
    )
