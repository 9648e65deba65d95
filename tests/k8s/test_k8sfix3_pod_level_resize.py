"""Pod-level resources during a pod-level in-place resize (InPlacePodLevelResourcesVerticalScaling,
k8s 1.35 alpha): the kubelet reports the pod's actuated ``status.resources`` and its
``status.allocatedResources``, and kube-scheduler (``resourcehelper.PodRequests`` with
``UseStatusResources``) counts the largest of those and ``spec.resources.requests`` (the spec
left out when the resize is infeasible). Was: only the spec was read, so a pod shrinking in
place freed its old size on the node before the kubelet had actuated the new one."""

from __future__ import annotations

from typing import Any

import pytest

from iro_fed.feasibility import feasible_nodes
from iro_fed.k8s.snapshot import PodSpecError, build_snapshot, pod_demand
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState

RES = ("cpu", "memory")


def pod_level(spec_cpu: str, allocated: str | None, actuated: str | None, *, infeasible: bool = False) -> dict[str, Any]:
    """A pod bound to ``n1`` with pod-level requests (``spec_cpu``, 1Gi) over one container of
    100m, and the pod-level allocated / actuated cpu the kubelet reports (``None``: absent)."""
    pod = make_pod("r", cpu="100m", memory="128Mi", node="n1")
    pod["spec"]["resources"] = {"requests": {"cpu": spec_cpu, "memory": "1Gi"}}
    status: dict[str, Any] = {"phase": "Running"}
    if actuated is not None:
        status["resources"] = {"requests": {"cpu": actuated, "memory": "1Gi"}, "limits": {"cpu": actuated}}
    if allocated is not None:
        status["allocatedResources"] = {"cpu": allocated, "memory": "1Gi"}
    if infeasible:
        status["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]
    pod["status"] = status
    return pod


def test_a_pod_shrinking_in_place_at_pod_level_keeps_its_old_cpu_on_the_node():
    # Pod-level cpu lowered from 6 to 1, allocated 1, still running with 6: kube counts 6, so a
    # 4-cpu pod does not fit on the 8-cpu node (the spec alone let it in).
    node = make_node("n1", cpu="8")
    snap = build_snapshot([node], [pod_level("1", "1", "6")], [make_pod("p", cpu="4", memory="1Gi")])
    assert snap.problem.allocated[0].tolist() == [6000.0, 1024.0]
    assert snap.problem.initial_nonzero[0].tolist() == [6000.0, 1024.0]
    assert feasible_nodes(ClusterState(snap.problem), 0).tolist() == [False]


def test_an_allocated_pod_level_amount_counts_before_it_is_actuated():
    assert pod_demand(pod_level("1", "3", "1"), RES).requests["cpu"] == 3000.0
    # Without status.resources (not resized, or the gate off) the spec counts: allocatedResources
    # alone is no pod-level resize status (PodRequests reads it only beside status.resources).
    assert pod_demand(pod_level("1", None, None), RES).requests == {"cpu": 1000.0, "memory": 1024.0}
    assert pod_demand(pod_level("1", "3", None), RES).requests["cpu"] == 1000.0


def test_an_infeasible_pod_level_resize_counts_what_the_pod_has_not_the_spec():
    assert pod_demand(pod_level("6", "2", "2", infeasible=True), RES).requests["cpu"] == 2000.0
    assert pod_demand(pod_level("6", "2", "2"), RES).requests["cpu"] == 6000.0  # a resize that may still come


@pytest.mark.parametrize("allocated, actuated, field", [
    ("lots", "1", "status.allocatedResources.cpu"),
    ("1", "-2", "status.resources.requests.cpu"),
])
def test_a_bad_pod_level_status_quantity_is_an_error_naming_its_field(allocated, actuated, field):
    with pytest.raises(PodSpecError) as err:
        pod_demand(pod_level("1", allocated, actuated), RES)
    assert err.value.field == field
