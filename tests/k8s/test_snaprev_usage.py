"""What a bound pod takes on its node, against kube-scheduler: GPU cards named twice in the
``iro-fed.io/gpu-cards`` annotation, and pods being resized in place (InPlacePodVerticalScaling,
on by default since k8s 1.33: ``resourcehelper.PodRequests`` with ``UseStatusResources``)."""

from __future__ import annotations

from typing import Any

import pytest

from iro_fed.feasibility import feasible_nodes
from iro_fed.k8s.snapshot import PodSpecError, build_snapshot, pod_demand
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState

RES = ("cpu", "memory")


def test_a_gpu_card_named_twice_takes_free_cards_and_the_snapshot_still_builds():
    # A pod's owner may edit its annotations: "0,0" once made card 0 free -1000 milli, and the
    # problem loader then refused the whole cluster (no pod scheduled anywhere).
    node = make_node("g1", gpus=4)
    bound = [make_pod("x", node="g1", gpus=2, annotations={"iro-fed.io/gpu-cards": "0,0"})]
    snap = build_snapshot([node], bound, [make_pod("two", gpus=2), make_pod("three", gpus=3)])
    assert snap.problem.gpu_free[0].tolist() == [0, 0, 1000, 1000]  # two whole cards, first fit
    state = ClusterState(snap.problem)
    assert feasible_nodes(state, 0).tolist() == [True]
    assert feasible_nodes(state, 1).tolist() == [False]


def resizing(spec_cpu: str, allocated: str | None, actuated: str | None, *, infeasible: bool = False,
             legacy: bool = False) -> dict[str, Any]:
    """A pod bound to ``n1`` whose container asks ``spec_cpu`` while the kubelet reports the
    allocated / actuated cpu (``None``: not reported)."""
    pod = make_pod("r", cpu=spec_cpu, memory="1Gi", node="n1")
    cs: dict[str, Any] = {"name": "app", "ready": True, "restartCount": 0, "image": "x", "imageID": ""}
    if allocated is not None:
        cs["allocatedResources"] = {"cpu": allocated, "memory": "1Gi"}
    if actuated is not None:
        cs["resources"] = {"requests": {"cpu": actuated, "memory": "1Gi"}}
    pod["status"] = {"phase": "Running", "containerStatuses": [cs]}
    if infeasible and legacy:
        pod["status"]["resize"] = "Infeasible"  # k8s 1.27..1.32
    elif infeasible:
        pod["status"]["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]
    return pod


def test_a_pod_shrinking_in_place_keeps_its_old_cpu_until_the_kubelet_actuates_it():
    # Spec lowered from 6 to 1 cpu, accepted (allocated 1) but the container still runs with 6:
    # kube-scheduler counts max(spec, allocated, actuated) = 6, so a 4-cpu pod does not fit on 8.
    node = make_node("n1", cpu="8")
    snap = build_snapshot([node], [resizing("1", "1", "6")], [make_pod("p", cpu="4", memory="1Gi")])
    assert snap.problem.allocated[0].tolist() == [6000.0, 1024.0]
    assert snap.problem.initial_nonzero[0].tolist() == [6000.0, 1024.0]
    assert feasible_nodes(ClusterState(snap.problem), 0).tolist() == [False]


def test_a_pod_growing_in_place_counts_its_new_request_at_once():
    assert pod_demand(resizing("6", "1", "1"), RES).requests["cpu"] == 6000.0


@pytest.mark.parametrize("legacy", [False, True])
def test_an_infeasible_resize_counts_what_the_container_has_not_the_spec(legacy):
    # The kubelet will not grant 6 cpu (more than the node has): the pod keeps 1, and kube counts 1.
    assert pod_demand(resizing("6", "1", "1", infeasible=True, legacy=legacy), RES).requests["cpu"] == 1000.0


def test_only_an_allocated_amount_reported_still_counts():
    assert pod_demand(resizing("1", "3", None), RES).requests["cpu"] == 3000.0


def test_a_pod_without_container_statuses_counts_its_spec():
    pod = make_pod("plain", cpu="1", node="n1")
    pod["status"] = {"phase": "Running"}
    assert pod_demand(pod, RES).requests["cpu"] == 1000.0


def test_a_bad_status_quantity_is_an_error_naming_its_field():
    with pytest.raises(PodSpecError) as err:
        pod_demand(resizing("1", "lots", "1"), RES)
    assert err.value.field == "status.containerStatuses[0].allocatedResources.cpu"


@pytest.mark.parametrize("gpus", ["1E", "2000"])
def test_a_node_with_more_gpus_than_the_model_holds_is_an_error_naming_its_field(gpus):
    # "1E" (10^18) is a valid quantity: the usage's list of cards was a MemoryError, not an error.
    node = make_node("big")
    node["status"]["allocatable"]["nvidia.com/gpu"] = gpus
    with pytest.raises(PodSpecError) as err:
        build_snapshot([node], [], [])
    assert err.value.field == "status.allocatable.nvidia.com/gpu"
    assert "at most 1024" in str(err.value)
