"""kube-scheduler's words for two cases the Kubernetes snapshot read wrongly.

* A node still tainted ``node.kubernetes.io/unschedulable:NoSchedule`` without
  ``spec.unschedulable`` (uncordoned, before the node lifecycle controller removes the taint, or a
  taint added by hand) was "node(s) were unschedulable". NodeUnschedulable reads
  ``spec.unschedulable`` only (``nodeunschedulable`` Filter), so kube reports the taint through
  TaintToleration: "node(s) had untolerated taint {node.kubernetes.io/unschedulable: }".
* A required node affinity whose ``matchFields`` ``metadata.name In`` sets conflict (every term's
  intersection empty) was "N node(s) didn't satisfy plugin(s) [NodeAffinity]". NodeAffinity's
  PreFilter returns ``errReasonConflict`` and ``FitError.Error`` then gives the PreFilter
  message alone: "0/N nodes are available: pod affinity terms conflict."
"""

from __future__ import annotations

from typing import Any

import numpy as np

import solvers
from iro_fed import ClusterState
from iro_fed.feasibility import UNSCHEDULABLE_LABEL, explain, feasible_nodes
from iro_fed.k8s.extender import node_reasons
from iro_fed.k8s.snapshot import build_snapshot
from iro_fed.problem_io import problem_from_dict, problem_to_dict

CORDON = {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"}
BATCH = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
LINGERING = "node(s) had untolerated taint {node.kubernetes.io/unschedulable: }"


def node(name: str, unschedulable: bool | None = None, taints: list | None = None, labels: dict | None = None,
         cpu: str = "4") -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def pod(name: str = "p", terms: list | None = None, tolerations: list | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]}
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": name, "namespace": "d"}, "spec": spec}


def names_in(*groups: tuple[str, ...]) -> dict[str, Any]:
    """A term with one ``matchFields`` ``metadata.name In`` requirement per group (ANDed)."""
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(g)} for g in groups]}


def why(snap: Any, w: int = 0) -> str:
    return explain(ClusterState(snap.problem), w)


# --- the unschedulable taint without spec.unschedulable --------------------------------------------


def test_an_uncordoned_node_that_keeps_the_taint_is_an_untolerated_taint() -> None:
    snap = build_snapshot([node("n1", unschedulable=False, taints=[CORDON])], [], [pod()])
    assert why(snap) == f"0/1 nodes are available: 1 {LINGERING}."  # was "1 node(s) were unschedulable"


def test_only_spec_unschedulable_is_a_cordon() -> None:
    nodes = [
        node("cordoned", unschedulable=True),  # the snapshot adds the taint
        node("cordoned-tainted", unschedulable=True, taints=[BATCH, CORDON]),
        node("lingering", taints=[CORDON]),  # no spec.unschedulable at all
        node("lingering-batch-first", unschedulable=False, taints=[BATCH, CORDON]),  # the node's first taint
        node("small", cpu="100m"),
    ]
    snap = build_snapshot(nodes, [], [pod()])
    assert why(snap) == (
        "0/5 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: batch}, "
        f"1 {LINGERING}, 2 node(s) were unschedulable."
    )
    reasons = node_reasons(ClusterState(snap.problem), 0, np.arange(5))
    assert reasons[2] == (LINGERING, True)  # TaintToleration: UnschedulableAndUnresolvable
    assert reasons[0] == ("node(s) were unschedulable", True)


def test_which_nodes_fit_does_not_change() -> None:
    tolerate = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    nodes = [node("cordoned", unschedulable=True), node("lingering", taints=[CORDON]), node("free")]
    snap = build_snapshot(nodes, [], [pod(), pod("tolerant", tolerations=tolerate)])
    state = ClusterState(snap.problem)
    assert feasible_nodes(state, 0).tolist() == [False, False, True]
    assert feasible_nodes(state, 1).tolist() == [True, True, True]


def test_the_label_is_the_snapshots_alone() -> None:
    # A node's own iro-fed.io/unschedulable label says nothing: spec.unschedulable does.
    nodes = [
        node("says-true", labels={UNSCHEDULABLE_LABEL: "true"}),
        node("says-false", unschedulable=True, labels={UNSCHEDULABLE_LABEL: "false"}),
        node("plain", labels={UNSCHEDULABLE_LABEL: "false"}),
    ]
    snap = build_snapshot(nodes, [], [pod()])
    assert [UNSCHEDULABLE_LABEL in n.labels for n in snap.problem.nodes] == [False, False, False]
    assert feasible_nodes(ClusterState(snap.problem), 0).tolist() == [True, False, True]
    assert why(snap) == "2/3 nodes are available: 1 node(s) were unschedulable."


def test_the_reading_survives_a_problem_file_round_trip() -> None:
    nodes = [node("cordoned", unschedulable=True), node("lingering", taints=[CORDON])]
    snap = build_snapshot(nodes, [], [pod()])
    again = problem_from_dict(problem_to_dict(snap.problem))
    assert explain(ClusterState(again), 0) == why(snap) == (
        f"0/2 nodes are available: 1 {LINGERING}, 1 node(s) were unschedulable."
    )


def test_kube_default_reports_the_taint_too() -> None:
    snap = build_snapshot([node("lingering", taints=[CORDON])], [], [pod()])
    result = solvers.make("kube-default").solve(snap.problem)
    assert result.assignment.tolist() == [-1]
    assert explain(ClusterState(snap.problem), 0) == f"0/1 nodes are available: 1 {LINGERING}."


# --- NodeAffinity PreFilter: conflicting node names ------------------------------------------------


def test_conflicting_node_names_are_the_prefilter_message_alone() -> None:
    nodes = [node("a"), node("b"), node("c", unschedulable=True)]
    snap = build_snapshot(nodes, [], [pod(terms=[names_in(("a",), ("b",))])])
    # was "0/3 nodes are available: 3 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    assert why(snap) == "0/3 nodes are available: pod affinity terms conflict."
    assert not feasible_nodes(ClusterState(snap.problem), 0).any()


def test_every_term_must_conflict() -> None:
    conflict = names_in(("a",), ("b",))
    snap = build_snapshot(
        [node("a"), node("b")], [],
        [pod("all", terms=[conflict, names_in(("a", "x"), ("b",))]), pod("one", terms=[conflict, names_in(("b",))])],
    )
    assert why(snap, 0) == "0/2 nodes are available: pod affinity terms conflict."
    # The union of the terms' names is {b}: PreFilter narrows to it, the conflicting term matches nothing.
    assert feasible_nodes(ClusterState(snap.problem), 1).tolist() == [False, True]


def test_names_of_absent_nodes_are_not_a_conflict() -> None:
    snap = build_snapshot([node("a"), node("b")], [], [pod(terms=[names_in(("gone",))])])
    assert why(snap) == "0/2 nodes are available: 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."


def test_pods_with_the_same_conflicting_terms_in_one_batch() -> None:
    terms = [names_in(("a",), ("b",))]
    snap = build_snapshot([node("a"), node("b")], [], [pod("p1", terms=terms), pod("p2", terms=terms), pod("free")])
    assert [why(snap, w) for w in (0, 1)] == ["0/2 nodes are available: pod affinity terms conflict."] * 2
    assert why(snap, 2) == "2/2 nodes are available."


def test_the_extender_gives_every_node_the_prefilter_status() -> None:
    snap = build_snapshot([node("a"), node("b")], [], [pod(terms=[names_in(("a",), ("b",))])])
    reasons = node_reasons(ClusterState(snap.problem), 0, np.arange(2))
    assert reasons == {0: ("pod affinity terms conflict", True), 1: ("pod affinity terms conflict", True)}
