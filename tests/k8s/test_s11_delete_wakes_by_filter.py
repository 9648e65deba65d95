"""A bound pod's delete retries only the waiting pods that some node rejected for their resources;
a GPU holding that moves or grows frees nothing.

kube-scheduler consults the queueing hints of the plugins that rejected a pod. Of the plugins the
model stands for, only NodeResourcesFit registers a pod delete (``AssignedPodDelete``: a bound pod
deleted, finished, or a failed binding); NodeAffinity, TaintToleration, NodeUnschedulable and
NodeName register node events only. So a pod no node admits by its labels or taints is not moved
by a delete, only by a node change. NodeResourcesFit's scale-down hint counts a resource only when
the scaled-down pod requests less of it. Before: a delete retried every waiting pod, and GPU cards
that moved or grew counted as freeing ``nvidia.com/gpu``.

The stores are listed at chosen moments and the queue's clock is a fake one: nothing is timed.
"""

from __future__ import annotations

from typing import Any

import pytest

from iro_fed.k8s.testing import FakeApiServer, InjectedError, make_node, make_pod
from tests.k8s.helpers import make_scheduler

from .test_sched_fix_queueing_hints import _edit, statuses, step

TAINT = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]


def _changed(s: Any, key: str) -> bool:
    return bool(s.queue_status()[key]["cluster_changed"])


@pytest.fixture
def cluster(api: FakeApiServer) -> FakeApiServer:
    """n0 (4 CPUs) runs ``hog`` (3 CPUs): pending ``cpu-pod`` (2 CPUs) fits once hog goes;
    ``picky`` (1 CPU) selects ``disk=ssd``, which no node has."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("hog", cpu="3", node="n0"))
    api.add_pod(make_pod("cpu-pod", cpu="2", scheduler="iro"))
    api.add_pod(make_pod("picky", cpu="1", scheduler="iro", node_selector={"disk": "ssd"}))
    return api


def test_a_bound_pod_delete_does_not_retry_a_pod_no_node_admits_by_labels(cluster, sched, clock):
    assert sorted(step(sched)) == ["default/cpu-pod", "default/picky"]
    cluster.delete("pods", "default/hog")
    clock.advance(sched.pod_max_backoff_s)
    # The cpu-rejected pod is tried again and fits; picky is not (was: tried, to fail the same way).
    assert step(sched) == ["default/cpu-pod"]
    assert statuses(sched, "default/cpu-pod") == ["unschedulable", "bound"]
    assert statuses(sched, "default/picky") == ["unschedulable"]
    assert not _changed(sched, "default/picky")
    # A node label change moves it (NodeAffinity's hint), and now it fits.
    _edit(cluster, "nodes", "n0", lambda node: node["metadata"]["labels"].update(disk="ssd"))
    assert step(sched) == ["default/picky"]
    assert statuses(sched, "default/picky") == ["unschedulable", "bound"]
    assert cluster.get("pods", "default/picky")["spec"]["nodeName"] == "n0"


def test_a_finished_bound_pod_does_not_retry_a_pod_only_taints_keep_out(api, kubeconfig, clock):
    """n0 is tainted: ``tolerant`` (2 CPUs) tolerates the taint and waits for room; ``intolerant``
    does not. hog finishing (Succeeded: a delete to kube's informer) moves only ``tolerant``."""
    api.add_node(make_node("n0", cpu="4", taints=[TAINT]))
    hog = make_pod("hog", cpu="3", node="n0", tolerations=TOLERATE)
    api.add_pod(hog)
    api.add_pod(make_pod("tolerant", cpu="2", scheduler="iro", tolerations=TOLERATE))
    api.add_pod(make_pod("intolerant", cpu="1", scheduler="iro"))
    s = make_scheduler(kubeconfig, clock)
    try:
        assert sorted(step(s)) == ["default/intolerant", "default/tolerant"]
        _edit(api, "pods", "default/hog", lambda pod: pod["status"].update(phase="Succeeded"))
        clock.advance(s.pod_max_backoff_s)
        assert step(s) == ["default/tolerant"]  # was: intolerant too
        assert statuses(s, "default/tolerant") == ["unschedulable", "bound"]
        assert not _changed(s, "default/intolerant")
        _edit(api, "nodes", "n0", lambda node: node["spec"].pop("taints"))  # TaintToleration's hint
        assert step(s) == ["default/intolerant"]
        assert statuses(s, "default/intolerant") == ["unschedulable", "bound"]
    finally:
        s.stop()


def test_a_failed_binding_does_not_retry_a_pod_no_node_admits_by_labels(api, kubeconfig, clock):
    """A failed Binding frees the room its batch counted (kube's AssignedPodDelete): the pod kept
    out by that room is moved, the pod no node's labels admit is not."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("a", cpu="3", scheduler="iro"))
    api.add_pod(make_pod("b", cpu="3", scheduler="iro"))
    api.add_pod(make_pod("picky", cpu="1", scheduler="iro", node_selector={"disk": "ssd"}))
    s = make_scheduler(kubeconfig, clock)
    try:
        def fail(ns: str, name: str, body: dict[str, Any]) -> None:
            raise InjectedError(500, "InternalError", "etcd timed out")

        api.binding_hook = fail
        assert sorted(step(s)) == ["default/a", "default/b", "default/picky"]
        kept_out = next(o.key for o in s.batches[0].pods if o.status == "unschedulable" and o.key != "default/picky")
        assert _changed(s, kept_out)
        assert not _changed(s, "default/picky")  # was: moved by the failed binding
    finally:
        s.stop()


def test_a_bound_pod_delete_still_retries_a_pod_whose_spec_was_unreadable(cluster, sched, clock):
    """A pod refused as an invalid spec has no known rejecting filter: every change counts for it."""
    cluster.add_pod(make_pod("odd", cpu="lots", scheduler="iro"))
    sched.pending._list()
    step(sched)
    assert statuses(sched, "default/odd") == ["invalid"]
    cluster.delete("pods", "default/hog")
    sched.cache.pods._list()
    assert _changed(sched, "default/odd") and not _changed(sched, "default/picky")


# --- GPU cards: only a decrease of what the pod holds frees nvidia.com/gpu --------------------------


def test_gpu_cards_that_move_free_nothing(api, kubeconfig, clock):
    """n0 has 3 cards; hog holds cards 0 and 1; ``gpu-pod`` asks for 2. hog's cards moving to 1
    and 2 leave one card free as before: not a scale-down. Its delete is."""
    api.add_node(make_node("n0", cpu="8", gpus=3))
    api.add_pod(make_pod("hog", cpu="1", node="n0", gpus=2, annotations={"iro-fed.io/gpu-cards": "0,1"}))
    api.add_pod(make_pod("gpu-pod", cpu="1", scheduler="iro", gpus=2))
    s = make_scheduler(kubeconfig, clock)
    try:
        assert step(s) == ["default/gpu-pod"]
        _edit(api, "pods", "default/hog", lambda pod: pod["metadata"]["annotations"].update({"iro-fed.io/gpu-cards": "1,2"}))
        clock.advance(s.pod_max_backoff_s)
        assert step(s) == []  # was: tried again, one card still free
        assert not _changed(s, "default/gpu-pod")
        api.delete("pods", "default/hog")
        assert step(s) == ["default/gpu-pod"]
        assert statuses(s, "default/gpu-pod") == ["unschedulable", "bound"]
    finally:
        s.stop()


def test_a_gpu_share_that_grows_frees_nothing_and_one_that_shrinks_does(api, kubeconfig, clock):
    """n0 has one card; hog holds a 300-milli share of it; ``share-pod`` asks for 800."""
    api.add_node(make_node("n0", cpu="8", gpus=1))
    api.add_pod(make_pod("hog", cpu="1", node="n0",
                         annotations={"iro-fed.io/gpu-milli": "300", "iro-fed.io/gpu-cards": "0"}))
    api.add_pod(make_pod("share-pod", cpu="1", scheduler="iro", annotations={"iro-fed.io/gpu-milli": "800"}))
    s = make_scheduler(kubeconfig, clock)

    def share(milli: str) -> None:
        _edit(api, "pods", "default/hog", lambda pod: pod["metadata"]["annotations"].update({"iro-fed.io/gpu-milli": milli}))

    try:
        assert step(s) == ["default/share-pod"]
        share("500")
        clock.advance(s.pod_max_backoff_s)
        assert step(s) == []  # was: tried again, less room than before
        assert not _changed(s, "default/share-pod")
        share("100")
        assert step(s) == ["default/share-pod"]
        assert statuses(s, "default/share-pod") == ["unschedulable", "bound"]
    finally:
        s.stop()
