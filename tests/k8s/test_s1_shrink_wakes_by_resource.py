"""A bound pod's actuated in-place shrink sends back only the waiting pods it can fit.

kube-scheduler's NodeResourcesFit hint for a pod scale-down (``isSchedulableAfterPodScaleDown``,
v1.31+) moves a waiting pod only when the scaled-down pod freed a resource that pod requests, and
is consulted only for a pod that plugin rejected. Before: a shrink of any resource retried every
waiting pod, so a memory shrink re-solved a pod that asks only for cpu (or only for a GPU), and a
shrink retried a pod no node's labels admit.

Most tests run no thread: the stores are listed at chosen moments and the queue's clock is a fake
one. The threaded one waits on events, never on time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from iro_fed.k8s.client import Kube
from iro_fed.k8s.scheduler import IroScheduler
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod

from .test_sched_fix_queueing_hints import _edit, statuses, step


def _hog(cpu: str = "3", memory: str = "6Gi", gpus: int = 0) -> dict[str, Any]:
    """``hog`` bound to n0, its container's resize state in the status (allocated = actuated)."""
    pod = make_pod("hog", cpu=cpu, memory=memory, node="n0", gpus=gpus)
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    pod["status"]["containerStatuses"] = [{
        "name": "app", "ready": True, "restartCount": 0,
        "allocatedResources": dict(requests), "resources": {"requests": dict(requests)},
    }]
    return pod


def _shrink(resource: str, quantity: str) -> Callable[[dict[str, Any]], None]:
    """An in-place resize of ``hog`` that the kubelet has actuated: spec, allocated and actuated."""
    def change(pod: dict[str, Any]) -> None:
        pod["spec"]["containers"][0]["resources"]["requests"][resource] = quantity
        cs = pod["status"]["containerStatuses"][0]
        cs["allocatedResources"][resource] = cs["resources"]["requests"][resource] = quantity
    return change


@pytest.fixture
def cluster(api: FakeApiServer) -> FakeApiServer:
    """n0 (4 CPUs, 8 GiB) runs ``hog`` (3 CPUs, 6 GiB): pending ``cpu-pod`` (2 CPUs, no memory)
    and ``mem-pod`` (4 GiB, no cpu) fit nowhere until hog shrinks in what each asks for."""
    api.add_node(make_node("n0", cpu="4", memory="8Gi"))
    api.add_pod(_hog())
    api.add_pod(make_pod("cpu-pod", cpu="2", memory=None, scheduler="iro"))
    api.add_pod(make_pod("mem-pod", cpu=None, memory="4Gi", scheduler="iro"))
    return api


def test_a_memory_shrink_leaves_a_cpu_pod_waiting_until_the_flush(cluster, sched, clock):
    assert sorted(step(sched)) == ["default/cpu-pod", "default/mem-pod"]
    _edit(cluster, "pods", "default/hog", _shrink("memory", "1Gi"))
    clock.advance(sched.pod_max_backoff_s)
    # Only the pod that asks for memory is tried again (and fits); was: both were re-solved.
    assert step(sched) == ["default/mem-pod"]
    assert statuses(sched, "default/mem-pod") == ["unschedulable", "bound"]
    assert cluster.get("pods", "default/mem-pod")["spec"]["nodeName"] == "n0"
    assert statuses(sched, "default/cpu-pod") == ["unschedulable"]
    assert not sched.queue_status()["default/cpu-pod"]["cluster_changed"]
    # Still waiting, not lost: the 5-minute flush tries it again whatever happened.
    clock.advance(sched.max_unschedulable_s)
    assert step(sched) == ["default/cpu-pod"]
    assert statuses(sched, "default/cpu-pod") == ["unschedulable", "unschedulable"]


def test_a_cpu_shrink_wakes_the_cpu_pod_only(cluster, sched, clock):
    assert sorted(step(sched)) == ["default/cpu-pod", "default/mem-pod"]
    _edit(cluster, "pods", "default/hog", _shrink("cpu", "1"))
    clock.advance(sched.pod_max_backoff_s)
    assert step(sched) == ["default/cpu-pod"]  # was: mem-pod too, to fail again
    assert statuses(sched, "default/cpu-pod") == ["unschedulable", "bound"]
    assert cluster.get("pods", "default/cpu-pod")["spec"]["nodeName"] == "n0"
    assert statuses(sched, "default/mem-pod") == ["unschedulable"]
    assert not sched.queue_status()["default/mem-pod"]["cluster_changed"]


def test_a_shrink_during_an_attempt_counts_for_it(cluster, sched, clock):
    """A scale-down that comes while the pod's attempt runs is judged when the pod is queued
    (kube's in-flight events), with the pod's requests: the cpu shrink moves cpu-pod only."""
    sched.cache.nodes._list()
    sched.cache.pods._list()
    sched.pending._list()
    pods = sched.ready_pods()
    real_model = sched._model

    def model_then_shrink(batch: Any) -> Any:
        model = real_model(batch)  # the attempt reads the cluster before the shrink...
        _edit(cluster, "pods", "default/hog", _shrink("cpu", "1"))
        sched.cache.pods._list()  # ...which the watch delivers before the failures are queued
        return model

    sched._model = model_then_shrink
    sched.batches.append(sched.schedule_batch(pods))
    sched._model = real_model
    status = sched.queue_status()
    assert status["default/cpu-pod"]["cluster_changed"] and not status["default/mem-pod"]["cluster_changed"]
    clock.advance(sched.pod_max_backoff_s)
    assert step(sched) == ["default/cpu-pod"]
    assert statuses(sched, "default/cpu-pod") == ["unschedulable", "bound"]


def test_a_scale_down_dropped_from_the_bounded_log_counts_for_every_pod(cluster, sched, clock, monkeypatch):
    """The log of scale-downs is bounded (SHRINK_LOG): one dropped from it is no longer judged
    by resource, so it counts for every waiting pod rather than being missed."""
    from iro_fed.k8s import scheduler

    monkeypatch.setattr(scheduler, "SHRINK_LOG", 1)
    assert sorted(step(sched)) == ["default/cpu-pod", "default/mem-pod"]
    _edit(cluster, "pods", "default/hog", _shrink("memory", "5Gi"))
    sched.cache.pods._list()
    assert not sched.queue_status()["default/cpu-pod"]["cluster_changed"]
    _edit(cluster, "pods", "default/hog", _shrink("memory", "4500Mi"))  # the first one is dropped
    sched.cache.pods._list()
    status = sched.queue_status()
    assert status["default/cpu-pod"]["cluster_changed"] and status["default/mem-pod"]["cluster_changed"]


def test_a_shrink_does_not_retry_a_pod_that_no_node_admits(api, kubeconfig, clock):
    """``picky`` asks for cpu but selects a label no node has: it was never rejected for its
    resources, so a cpu shrink does not move it; a node label change does."""
    from tests.k8s.helpers import make_scheduler

    api.add_node(make_node("n0", cpu="4", memory="8Gi"))
    api.add_pod(_hog())
    api.add_pod(make_pod("picky", cpu="2", memory=None, scheduler="iro", node_selector={"disk": "ssd"}))
    s = make_scheduler(kubeconfig, clock)
    try:
        assert step(s) == ["default/picky"]
        _edit(api, "pods", "default/hog", _shrink("cpu", "1"))
        clock.advance(s.pod_max_backoff_s)
        assert step(s) == []  # was: tried again, to fail the same way
        assert not s.queue_status()["default/picky"]["cluster_changed"]
        _edit(api, "nodes", "n0", lambda node: node["metadata"]["labels"].update(disk="ssd"))
        assert step(s) == ["default/picky"]
        assert statuses(s, "default/picky") == ["unschedulable", "bound"]
    finally:
        s.stop()


def test_a_cpu_shrink_does_not_retry_a_pod_that_asks_only_for_a_gpu(api, kubeconfig, clock):
    from tests.k8s.helpers import make_scheduler

    api.add_node(make_node("n0", cpu="4", memory="8Gi", gpus=1))
    api.add_pod(_hog(gpus=1))
    api.add_pod(make_pod("gpu-pod", cpu=None, memory=None, gpus=1, scheduler="iro"))
    s = make_scheduler(kubeconfig, clock)
    try:
        assert step(s) == ["default/gpu-pod"]
        _edit(api, "pods", "default/hog", _shrink("cpu", "1"))
        clock.advance(s.pod_max_backoff_s)
        assert step(s) == []  # was: tried again, the card still held
        assert statuses(s, "default/gpu-pod") == ["unschedulable"]
        api.delete("pods", "default/hog")  # a delete moves every pod some node rejected for resources
        assert step(s) == ["default/gpu-pod"]
        assert statuses(s, "default/gpu-pod") == ["unschedulable", "bound"]
    finally:
        s.stop()


# --- the running loop: a wake only for the shrink that can fit the pod -------------------------


@pytest.fixture
def running(api: FakeApiServer, kubeconfig: str) -> Iterator[IroScheduler]:
    """n0 and hog as in ``cluster``, pending ``p`` (2 CPUs, no memory); a started scheduler whose
    poll is an hour and flush a day, so only a wake by a change retries ``p``."""
    api.add_node(make_node("n0", cpu="4", memory="8Gi"))
    api.add_pod(_hog())
    api.add_pod(make_pod("p", cpu="2", memory=None, scheduler="iro"))
    kube = Kube.from_kubeconfig(kubeconfig, user_agent="iro-scheduler/s1")
    s = IroScheduler(kube, identity="s1", poll_s=3600.0, max_unschedulable_s=86400.0, window_s=0,
                     leader_election=False, watch_timeout_s=5, pod_initial_backoff_s=0.001,
                     pod_max_backoff_s=0.001).start()
    yield s
    s.stop()


def _shrink_seen(api: FakeApiServer, s: IroScheduler, resource: str, quantity: str) -> None:
    """Shrink hog, and wait until the bound-pods watch has judged it (its hook runs before the
    store's version moves)."""
    with s.cache.pods.changed:
        before = s.cache.pods.version
    _edit(api, "pods", "default/hog", _shrink(resource, quantity))
    with s.cache.pods.changed:
        assert s.cache.pods.changed.wait_for(lambda: s.cache.pods.version > before, 20)


def test_the_loop_is_woken_by_a_cpu_shrink_not_a_memory_one(api, running):
    s = running
    assert api.wait_for(lambda: "default/p" in s.queue_status() and s.batches, 20)
    _shrink_seen(api, s, "memory", "1Gi")
    assert not s.queue_status()["default/p"]["cluster_changed"]
    _shrink_seen(api, s, "cpu", "1")
    assert api.wait_for(lambda: (api.get("pods", "default/p")["spec"].get("nodeName")) == "n0", 20)
    assert api.wait_for(lambda: len(s.batches) == 2, 20)  # the batch is recorded after its Binding
    assert [o.status for b in s.batches for o in b.pods] == ["unschedulable", "bound"]
