"""Which cluster changes send ``iro scheduler``'s unschedulable pods back to be tried (kube's
queueing hints), and a PodScheduled condition patch that failed.

Before: every change of a node or a bound pod (a status update, a label, a new binding) counted,
so with pods whose statuses update all the time each unschedulable pod was solved again on each
of them. kube-scheduler moves such a pod only on an event that can fit it: an assigned pod
deleted (or finished: its informer drops terminal pods) or scaled down, a node added or its
allocatable / labels / taints / unschedulable changed, a failed binding (AssignedPodDelete).

Most tests run no thread: the stores are lists taken at chosen moments and the queue's clock is a
fake one the test moves, so retries are counted, never timed. The threaded one synchronises on
events (a probe pod that wakes the loop), not on time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iro_fed.k8s.client import Kube
from iro_fed.k8s.scheduler import ASSUME_TTL_S, IroScheduler
from iro_fed.k8s.testing import FakeApiServer, InjectedError, make_node, make_pod
from tests.k8s.helpers import make_scheduler as make

HOUR = 3600.0


def step(s: IroScheduler) -> list[str]:
    """One pass of the loop over lists taken now: the keys solved (none: no solve)."""
    s.cache.nodes._list()
    s.cache.pods._list()
    s.pending._list()
    pods = s.ready_pods()
    if not pods:
        return []
    batch = s.schedule_batch(pods)
    s.batches.append(batch)
    return [o.key for o in batch.pods]


def statuses(s: IroScheduler, key: str) -> list[str]:
    return [o.status for b in s.batches for o in b.pods if o.key == key]


@pytest.fixture
def cluster(api: FakeApiServer) -> FakeApiServer:
    """n0 (4 CPUs) runs ``hog`` (3 CPUs); pending ``big`` (2 CPUs) fits nowhere until hog goes."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("hog", cpu="3", node="n0"))
    api.add_pod(make_pod("big", cpu="2", scheduler="iro"))
    return api


def _edit(api: FakeApiServer, kind: str, key: str, change: Callable[[dict[str, Any]], None]) -> None:
    obj = api.get(kind, key)
    change(obj)
    api.update(kind, obj)


def _status_update(i: int) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["status"]["podIP"] = f"10.0.0.{i + 1}"
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if i % 2 else "False"}]
    return change


def test_status_updates_of_a_bound_pod_do_not_retry_an_unschedulable_pod(cluster, sched, clock):
    assert step(sched) == ["default/big"]
    for i in range(5):
        _edit(cluster, "pods", "default/hog", _status_update(i))
        clock.advance(sched.pod_max_backoff_s)  # any backoff is over
        assert step(sched) == [], f"retried on status update {i + 1} of a bound pod"
    assert statuses(sched, "default/big") == ["unschedulable"]
    assert not sched.queue_status()["default/big"]["cluster_changed"]
    # then the bound pod goes: that frees room, so it is tried (once) and bound
    cluster.delete("pods", "default/hog")
    assert step(sched) == ["default/big"]
    assert statuses(sched, "default/big") == ["unschedulable", "bound"]


def _labels(pod: dict[str, Any]) -> None:
    pod["metadata"].setdefault("labels", {})["tier"] = "web"
    pod["metadata"].setdefault("annotations", {})["note"] = "x"


def _add_bound_pod(api: FakeApiServer) -> None:
    api.add_pod(make_pod("other", cpu="100m", node="n0"))


def _node_heartbeat(node: dict[str, Any]) -> None:
    node["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:10Z"}]
    node["metadata"].setdefault("annotations", {})["node.alpha.kubernetes.io/ttl"] = "0"


@pytest.mark.parametrize("change", [
    lambda api: _edit(api, "pods", "default/hog", _labels),
    _add_bound_pod,
    lambda api: _edit(api, "nodes", "n0", _node_heartbeat),
    lambda api: api.delete("nodes", "n0"),
], ids=["bound-pod-labels", "bound-pod-added", "node-heartbeat", "node-deleted"])
def test_changes_that_cannot_fit_it_do_not_retry_it(cluster, sched, clock, change):
    assert step(sched) == ["default/big"]
    change(cluster)
    clock.advance(sched.pod_max_backoff_s)  # its backoff is over: only the change could bring it back
    assert step(sched) == []
    assert statuses(sched, "default/big") == ["unschedulable"]


def _finish(pod: dict[str, Any]) -> None:
    pod["status"]["phase"] = "Succeeded"


def _shrink(pod: dict[str, Any]) -> None:  # an in-place resize
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"


def _grow_node(node: dict[str, Any]) -> None:
    node["status"]["allocatable"]["cpu"] = node["status"]["capacity"]["cpu"] = "8"


def _untaint_node(node: dict[str, Any]) -> None:
    node["spec"].pop("taints", None)


@pytest.mark.parametrize(("change", "node"), [
    (lambda api: api.delete("pods", "default/hog"), "n0"),
    (lambda api: _edit(api, "pods", "default/hog", _finish), "n0"),
    (lambda api: _edit(api, "pods", "default/hog", _shrink), "n0"),
    (lambda api: _edit(api, "nodes", "n0", _grow_node), "n0"),
    (lambda api: api.add_node(make_node("n1", cpu="8")), "n1"),
], ids=["bound-pod-deleted", "bound-pod-finished", "bound-pod-scaled-down", "node-allocatable", "node-added"])
def test_changes_that_can_fit_it_retry_it(cluster, sched, clock, change, node):
    assert step(sched) == ["default/big"]
    change(cluster)
    clock.advance(1.0)
    assert step(sched) == ["default/big"]
    assert statuses(sched, "default/big") == ["unschedulable", "bound"]
    assert cluster.get("pods", "default/big")["spec"]["nodeName"] == node


def test_a_node_label_or_taint_change_retries_it(api, kubeconfig, clock):
    # big selects zone=a and tolerates nothing; n0 is in zone b, then tainted, then fixed
    api.add_node(make_node("n0", cpu="8", zone="b"))
    pod = make_pod("big", cpu="2", scheduler="iro")
    pod["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "a"}
    api.add_pod(pod)
    s = make(kubeconfig, clock)
    try:
        assert step(s) == ["default/big"]

        def relabel(node: dict[str, Any]) -> None:
            node["metadata"]["labels"]["topology.kubernetes.io/zone"] = "a"
            node["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]

        _edit(api, "nodes", "n0", relabel)
        clock.advance(1.0)
        assert step(s) == ["default/big"]  # the labels moved it; the taint keeps it out
        assert statuses(s, "default/big") == ["unschedulable", "unschedulable"]
        _edit(api, "nodes", "n0", _untaint_node)
        clock.advance(2.0)
        assert step(s) == ["default/big"]
        assert statuses(s, "default/big") == ["unschedulable", "unschedulable", "bound"]
    finally:
        s.stop()


def test_a_failed_binding_retries_the_pods_its_batch_kept_out(api, kubeconfig, clock):
    """Two 3-CPU pods, room for one: the one placed fails to bind and is then deleted. The other,
    kept out only by the room counted for it, must not wait for the 5-minute flush."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("a", cpu="3", scheduler="iro"))
    api.add_pod(make_pod("b", cpu="3", scheduler="iro"))
    s = make(kubeconfig, clock)
    try:
        def fail(ns: str, name: str, body: dict[str, Any]) -> None:
            raise InjectedError(500, "InternalError", "etcd timed out")

        api.binding_hook = fail
        assert sorted(step(s)) == ["default/a", "default/b"]
        placed = next(o.key for o in s.batches[0].pods if o.status == "bind-error")
        kept_out = next(o.key for o in s.batches[0].pods if o.status == "unschedulable")
        api.binding_hook = None
        api.delete("pods", placed)
        clock.advance(1.0)
        assert step(s) == [kept_out]
        assert statuses(s, kept_out) == ["unschedulable", "bound"]
    finally:
        s.stop()


def test_an_assumed_pod_never_shown_bound_retries_the_pods_it_kept_out(api, kubeconfig, clock):
    """A pod bound here and deleted before the bound-pods view showed it counts on its node until
    ASSUME_TTL_S; when it stops counting, the pod it kept out is tried again then, not 5 min on."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("a", cpu="3", scheduler="iro"))
    s = make(kubeconfig, clock, max_unschedulable_s=HOUR)
    try:
        s.pending._list()
        assert [o.status for o in s.schedule_batch(s.ready_pods()).pods] == ["bound"]
        api.delete("pods", "default/a")  # the bound-pods list is never taken while it exists
        api.add_pod(make_pod("b", cpu="3", scheduler="iro"))
        s.pending._list()
        s.batches.append(s.schedule_batch(s.ready_pods()))
        assert statuses(s, "default/b") == ["unschedulable"]  # a still assumed on n0
        clock.advance(ASSUME_TTL_S + 1)
        s.pending._list()
        s.ready_pods()  # a's TTL ends here
        assert [p["metadata"]["name"] for p in s.ready_pods()] == ["b"]
    finally:
        s.stop()


# --- the running loop: a status update neither wakes it nor retries the pod ----------------------


def test_the_running_scheduler_ignores_status_churn_and_binds_when_room_frees(cluster, kubeconfig):
    s = IroScheduler(Kube.from_kubeconfig(kubeconfig), identity="hints", leader_election=False, window_s=0,
                     poll_s=HOUR, max_unschedulable_s=24 * HOUR, pod_initial_backoff_s=0.001,
                     pod_max_backoff_s=0.001, watch_timeout_s=5).start()
    try:
        assert cluster.wait_for(lambda: statuses(s, "default/big") == ["unschedulable"], 20)
        for i in range(5):
            _edit(cluster, "pods", "default/hog", _status_update(i))
        last = cluster.get("pods", "default/hog")["metadata"]["resourceVersion"]
        with s.cache.pods.changed:  # the watch has delivered every update
            assert s.cache.pods.changed.wait_for(
                lambda: s.cache.pods.store["default/hog"]["metadata"]["resourceVersion"] == last, 20)
        # A pending pod wakes the loop for sure; with big's backoff long over, big would be
        # solved with it if the updates had counted.
        cluster.add_pod(make_pod("probe", cpu="100m", scheduler="iro"))
        assert cluster.wait_for(lambda: statuses(s, "default/probe") == ["bound"], 20)
        assert statuses(s, "default/big") == ["unschedulable"]
        cluster.delete("pods", "default/hog")
        assert cluster.wait_for(lambda: statuses(s, "default/big") == ["unschedulable", "bound"], 20)
    finally:
        s.stop()


# --- a PodScheduled patch that failed is sent again ------------------------------------------------


class FlakyStatusServer(FakeApiServer):
    """Answers the first ``pods/status`` PATCH with 500, as an API server under load may."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    def _patch_status(self, ns: str, name: str, content_type: str, patch: Any) -> tuple[int, dict[str, Any]]:
        if self.failures:
            self.failures -= 1
            return 500, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                         "reason": "InternalError", "message": "etcdserver: request timed out"}
        return super()._patch_status(ns, name, content_type, patch)


@pytest.fixture
def flaky(tmp_path: Path) -> Iterator[tuple[FlakyStatusServer, str]]:
    server = FlakyStatusServer().start()
    try:
        yield server, str(server.write_kubeconfig(tmp_path / "kubeconfig.yaml"))
    finally:
        server.stop()


def test_a_failed_pod_scheduled_patch_is_sent_again_on_the_next_attempt(flaky, clock):
    """The condition is what cluster-autoscaler reads (PodScheduled=False, Unschedulable): a
    patch that failed was never sent again while the failure stayed the same, because the
    scheduler remembered the failure as reported. kube-scheduler compares with the pod instead."""
    api, kubeconfig = flaky
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("big", cpu="8", scheduler="iro"))
    s = make(kubeconfig, clock)
    try:
        assert step(s) == ["default/big"]
        assert api.get("pods", "default/big")["status"].get("conditions") is None  # the PATCH got 500
        # A change that moves it, and leaves the failure (the message) as it was: 8 CPUs fit nowhere.
        _edit(api, "nodes", "n0", lambda node: node["metadata"]["labels"].update(disk="ssd"))
        clock.advance(1.0)
        assert step(s) == ["default/big"]
        cond = api.get("pods", "default/big")["status"]["conditions"][0]
        assert (cond["type"], cond["status"], cond["reason"]) == ("PodScheduled", "False", "Unschedulable")
        # once shown, an unchanged failure is not patched again
        _edit(api, "nodes", "n0", lambda node: node["metadata"]["labels"].update(disk="nvme"))
        clock.advance(2.0)
        patches = len(api.requests_to("PATCH", "/pods/big/status$"))
        assert step(s) == ["default/big"]
        assert len(api.requests_to("PATCH", "/pods/big/status$")) == patches
    finally:
        s.stop()


# --- the Reflector's on_change hook the above rely on -----------------------------------------


def test_reflector_on_change_gets_old_and_new_from_the_watch_and_from_a_relist(api, kube):
    from iro_fed.k8s.client import Reflector

    def rv(obj: dict[str, Any] | None) -> str | None:
        return obj["metadata"]["resourceVersion"] if obj is not None else None

    changes: list[tuple[str, str | None, str | None]] = []

    def record(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        changes.append(((old or new)["metadata"]["name"], rv(old), rv(new)))

    api.add_pod(make_pod("keep", node="n0"))
    r = Reflector(kube.core.list_pod_for_all_namespaces, "pods", on_change=record, watch_timeout_s=5).start()
    try:
        assert api.wait_for(lambda: r.synced.is_set(), 20)
        keep = api.get("pods", "default/keep")
        a1 = api.add_pod(make_pod("a", node="n0"))
        a2 = api.update("pods", dict(a1, status={"phase": "Running"}))
        api.delete("pods", "default/a")
        assert api.wait_for(lambda: len(changes) == 4, 20)
    finally:
        r.stop()
    assert changes == [("keep", None, rv(keep)), ("a", None, rv(a1)), ("a", rv(a1), rv(a2)), ("a", rv(a2), None)]
    # a relist (the watch down meanwhile) reports what changed, deletions included, and only that
    changes.clear()
    b = api.add_pod(make_pod("b", node="n0"))
    api.delete("pods", "default/keep")
    r._list()
    assert sorted(changes) == [("b", None, rv(b)), ("keep", rv(keep), None)]
    changes.clear()
    r._list()
    assert changes == []
