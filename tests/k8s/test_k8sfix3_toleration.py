"""A pod with an alpha ``Lt`` / ``Gt`` toleration (Kubernetes 1.35 TaintTolerationComparisonOperators)
is read, not refused: one such pod no longer fails the whole snapshot. Its toleration tolerates
nothing here (as ``v1.Toleration.ToleratesTaint`` with the gate off), so the pod goes only where no
taint needs it. Real pod JSON through iro_fed.k8s.snapshot."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from iro_fed.feasibility import feasible_nodes
from iro_fed.k8s.snapshot import build_snapshot
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState
from iro_fed.problem_io import ProblemValidationError, problem_from_dict

SLA_TAINT = {"key": "example.com/sla", "value": "950", "effect": "NoSchedule"}


def feasible(snap, k: int) -> list[str]:
    state = ClusterState(snap.problem)
    return [snap.problem.nodes[i].name for i in np.flatnonzero(feasible_nodes(state, k))]


@pytest.mark.parametrize("op", ["Lt", "Gt"])
def test_a_pod_with_a_comparison_toleration_does_not_refuse_the_snapshot(op):
    nodes = [make_node("tainted", taints=[SLA_TAINT]), make_node("plain")]
    numeric = make_pod("numeric", tolerations=[{"key": "example.com/sla", "operator": op, "value": "900",
                                                "effect": "NoSchedule"}])
    exists = make_pod("exists", tolerations=[{"key": "example.com/sla", "operator": "Exists"}])
    other = make_pod("other")
    snap = build_snapshot(nodes, [], [numeric, exists, other])  # raised PodSpecError: operator must be Equal or Exists
    assert [w.name for w in snap.problem.workloads] == ["default/numeric", "default/exists", "default/other"]
    assert snap.problem.workloads[0].tolerations[0].operator == op
    assert feasible(snap, 0) == ["plain"]  # tolerates nothing: the tainted node is out
    assert feasible(snap, 1) == ["tainted", "plain"]
    assert feasible(snap, 2) == ["plain"]


def small_doc(toleration: dict) -> dict:
    return {
        "resources": ["cpu", "memory"],
        "domains": [{"name": "d", "kind": "zone"}],
        "nodes": [{"name": "n", "domain": "d", "capacity": {"cpu": 1000, "memory": 1024}}],
        "workloads": [{"name": "w", "demand": {"cpu": 100, "memory": 64}, "tolerations": [toleration]}],
    }


def test_a_comparison_toleration_round_trips_in_a_problem_file():
    p = problem_from_dict(small_doc({"key": "sla", "operator": "Gt", "value": "-5"}))
    t = p.workloads[0].tolerations[0]
    assert (t.key, t.operator, t.value) == ("sla", "Gt", "-5")


@pytest.mark.parametrize("toleration, path, fragment", [
    ({"key": "sla", "operator": "Lt", "value": "high"}, "workloads[0].tolerations[0].value", "integer"),
    ({"key": "sla", "operator": "Gt", "value": "0950"}, "workloads[0].tolerations[0].value", "leading zero"),
    ({"key": "sla", "operator": "Lt", "value": ""}, "workloads[0].tolerations[0].value", "integer"),
    ({"key": "sla", "operator": "Gt", "value": str(2**63)}, "workloads[0].tolerations[0].value", "int64"),
    ({"operator": "Lt", "value": "5"}, "workloads[0].tolerations[0].key", "required with operator Lt"),
])
def test_a_bad_comparison_toleration_is_refused_by_name(toleration, path, fragment):
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(copy.deepcopy(small_doc(toleration)))
    errors = dict(exc.value.errors)
    assert path in errors and fragment in errors[path], exc.value.errors
