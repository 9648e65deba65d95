"""An in-place shrink of a bound pod frees room only when the kubelet actuates it: the spec
update alone leaves the pod counted at its old size (kube's ``PodRequests`` with
``UseStatusResources`` takes the largest of spec, allocated and actuated), and the status
update that follows is what lowers its effective request. kube-scheduler classifies that
status update as ``UpdatePodScaleDown`` (``extractPodScaleDown`` compares ``PodRequests`` of the
old and new pod on every update) and NodeResourcesFit's hint moves the waiting pods.

Before: a status-only update of a bound pod never counted, so the waiting pod stayed out until
the 5-minute flush although the room was there.

No thread: the stores are listed at chosen moments and the queue's clock is a fake one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod

from .test_sched_fix_queueing_hints import _edit, statuses, step


def _container_pod(cpu: str) -> dict[str, Any]:
    """``hog`` bound to n0 with its container's resize state in the status (allocated = actuated = cpu)."""
    pod = make_pod("hog", cpu=cpu, node="n0")
    pod["status"]["containerStatuses"] = [{
        "name": "app", "ready": True, "restartCount": 0,
        "allocatedResources": {"cpu": cpu, "memory": "512Mi"},
        "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}},
    }]
    return pod


def _pod_level_pod(cpu: str) -> dict[str, Any]:
    """``hog`` with a pod-level request and the pod-level resize state (k8s 1.35 alpha)."""
    pod = make_pod("hog", cpu="100m", node="n0")
    pod["spec"]["resources"] = {"requests": {"cpu": cpu, "memory": "512Mi"}}
    pod["status"]["resources"] = {"requests": {"cpu": cpu, "memory": "512Mi"}}
    pod["status"]["allocatedResources"] = {"cpu": cpu, "memory": "512Mi"}
    return pod


def _container_spec(cpu: str) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return change


def _container_actuated(cpu: str) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        cs = pod["status"]["containerStatuses"][0]
        cs["allocatedResources"]["cpu"] = cs["resources"]["requests"]["cpu"] = cpu
    return change


def _pod_level_spec(cpu: str) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["spec"]["resources"]["requests"]["cpu"] = cpu
    return change


def _pod_level_actuated(cpu: str) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["status"]["resources"]["requests"]["cpu"] = pod["status"]["allocatedResources"]["cpu"] = cpu
    return change


CASES = {
    "container": (_container_pod, _container_spec, _container_actuated),
    "pod-level": (_pod_level_pod, _pod_level_spec, _pod_level_actuated),
}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def cluster(api: FakeApiServer, case: str) -> FakeApiServer:
    """n0 (4 CPUs) runs ``hog`` (3 CPUs); pending ``big`` (2 CPUs) fits nowhere until hog shrinks."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(CASES[case][0]("3"))
    api.add_pod(make_pod("big", cpu="2", scheduler="iro"))
    return api


def test_an_actuated_in_place_shrink_retries_the_waiting_pod(cluster, sched, clock, case):
    _, spec, actuated = CASES[case]
    assert step(sched) == ["default/big"]
    # The resize is asked for: the spec says 1 CPU, the kubelet still holds 3 (counted as 3).
    _edit(cluster, "pods", "default/hog", spec("1"))
    clock.advance(sched.pod_max_backoff_s)
    assert step(sched) == []
    assert not sched.queue_status()["default/big"]["cluster_changed"]
    # The kubelet actuates it (a status-only update): 1 CPU now, room for big.
    _edit(cluster, "pods", "default/hog", actuated("1"))
    assert step(sched) == ["default/big"]  # was []: it waited for the 5-minute flush
    assert statuses(sched, "default/big") == ["unschedulable", "bound"]
    assert cluster.get("pods", "default/big")["spec"]["nodeName"] == "n0"


def test_status_updates_that_do_not_shrink_it_do_not_retry_the_waiting_pod(cluster, sched, clock, case):
    _, _, actuated = CASES[case]
    assert step(sched) == ["default/big"]

    def churn(pod: dict[str, Any]) -> None:  # readiness flips, the resize state stays
        pod["status"]["podIP"] = "10.0.0.9"
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        for cs in pod["status"].get("containerStatuses", []):
            cs["ready"], cs["restartCount"] = False, 1

    for change in (churn, actuated("3"), actuated("3500m")):  # unchanged, then grown
        _edit(cluster, "pods", "default/hog", change)
        clock.advance(sched.pod_max_backoff_s)
        assert step(sched) == []
    assert statuses(sched, "default/big") == ["unschedulable"]
    assert not sched.queue_status()["default/big"]["cluster_changed"]
