"""``iro scheduler``: replicas that share an anti-affinity, spread or host-port rule are placed in one
batch (a replica the joint solve stacked on a node taken by an earlier replica moves to its best
other node, as kube placing one pod at a time would), and the loop does not wait ``window_s`` for a
batch made only of the pods the previous batch deferred. The queued pods waiting for a bound pod
added (``_add_waiters``) are only those still waiting. Loopback API server, real kubernetes client."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np

from iro_fed.k8s.client import Kube
from iro_fed.k8s.scheduler import IroScheduler
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from tests.k8s.helpers import ZONE, affinity, anti, cycle, make_scheduler, settle, spread


def nodes_of(api: FakeApiServer, prefix: str) -> dict[str, str | None]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in api.list("pods")
            if p["metadata"]["name"].startswith(prefix)}


def test_thirty_hostname_anti_affine_replicas_bind_in_one_batch(api, kubeconfig, clock):
    """The joint solve stacks the replicas on the best node; each after the first moves to another
    node (kube's one-at-a-time rule) instead of waiting for a batch of its own. Each bound pod's
    Event explains the node it was bound to."""
    for i in range(40):
        api.add_node(make_node(f"n{i}", cpu="16", zone=f"z{i % 5}"))
    for i in range(30):
        api.add_pod(make_pod(f"r{i}", cpu="1", scheduler="iro", labels={"app": "db"}, affinity=anti("db")))
    s = make_scheduler(kubeconfig, clock)
    try:
        batches = settle(s, limit=10)
    finally:
        s.stop()
    assert len(batches) == 1
    assert Counter(o.status for o in batches[0].pods) == {"bound": 30}
    placed = nodes_of(api, "r")
    assert all(placed.values()) and len(set(placed.values())) == 30  # one replica per node
    events = {e["involvedObject"]["name"]: e["message"] for e in api.list("events") if e["reason"] == "Scheduled"}
    for o in batches[0].pods:
        name = o.key.split("/")[1]
        assert o.node == placed[name]
        assert f"Successfully assigned {o.key} to {o.node} by" in events[name]
        assert o.runner_up != o.node


def test_spread_max_skew_one_over_three_zones_in_one_or_two_batches(api, kubeconfig, clock):
    for z in "abc":
        for i in range(3):
            api.add_node(make_node(f"{z}{i}", cpu="16", zone=z))
    for i in range(6):
        api.add_pod(make_pod(f"w{i}", cpu="1", scheduler="iro", labels={"app": "w"}, topology_spread=spread("w")))
    s = make_scheduler(kubeconfig, clock)
    try:
        batches = settle(s, limit=10)
    finally:
        s.stop()
    assert 1 <= len(batches) <= 2
    placed = nodes_of(api, "w")
    assert all(placed.values())
    assert Counter(node[0] for node in placed.values()) == {"a": 2, "b": 2, "c": 2}


def test_replicas_sharing_a_host_port_bind_in_one_batch(api, kubeconfig, clock):
    for i in range(4):
        api.add_node(make_node(f"n{i}", cpu="16"))
    for i in range(4):
        api.add_pod(make_pod(f"p{i}", cpu="1", scheduler="iro", ports=[{"containerPort": 80, "hostPort": 8080}]))
    s = make_scheduler(kubeconfig, clock)
    try:
        batches = settle(s, limit=10)
    finally:
        s.stop()
    assert len(batches) == 1
    assert sorted(nodes_of(api, "p").values()) == ["n0", "n1", "n2", "n3"]


def test_zone_anti_affine_replicas_beyond_the_zones_are_left_unschedulable(api, kubeconfig, clock):
    """One replica per zone is bound in the first batch; the others, with no node left (the search
    is skipped for the replicas of the same template after the first fails), are not bound."""
    for i in range(12):
        api.add_node(make_node(f"n{i}", cpu="16", zone=f"z{i % 3}"))
    for i in range(8):
        api.add_pod(make_pod(f"r{i}", cpu="1", scheduler="iro", labels={"app": "db"}, affinity=anti("db", ZONE)))
    s = make_scheduler(kubeconfig, clock)
    try:
        first = cycle(s)
        settle(s, limit=10)
    finally:
        s.stop()
    assert Counter(o.status for o in first.pods) == {"bound": 3, "deferred": 5}
    placed = [n for n in nodes_of(api, "r").values() if n]
    assert sorted(int(n[1:]) % 3 for n in placed) == [0, 1, 2]
    assert len([e for e in api.list("events") if e["reason"] == "FailedScheduling"]) == 5


def test_a_relocated_gpu_replica_gets_cards_of_its_new_node():
    """The joint solve stacked both GPU replicas on g0 (cards 0 and 1): the second moves to g1 and
    takes a card of g1; the state holds the batch as it will be bound."""
    from iro_fed.k8s.scheduler import _batch_conflicts
    from iro_fed.k8s.snapshot import ClusterModel
    from iro_fed.model import ClusterState

    nodes = [make_node("g0", cpu="16", gpus=2), make_node("g1", cpu="16", gpus=1)]
    pods = [make_pod(f"r{i}", cpu="1", gpus=1, labels={"app": "db"}, affinity=anti("db")) for i in range(2)]
    model = ClusterModel(nodes, [], pending=pods)
    problem = model.with_pods(pods).problem
    solved = np.array([0, 0])
    state = ClusterState.with_assignment(problem, solved, {0: (0,), 1: (1,)})
    conflicts, kept = _batch_conflicts(model, problem, pods, solved, state)
    assert conflicts == {}
    assert state.assignment.tolist() == [0, 1] and state.gpu_cards == {0: (0,), 1: (0,)}
    assert sorted(node for node, _ in kept.pods()) == ["g0", "g1"]
    assert solved.tolist() == [0, 0]  # the solver's assignment is left as it was


def test_a_relocated_replica_needs_room_beside_the_batch(api, kubeconfig, clock):
    """Two nodes with room for one replica each beside a full third: the replicas that do not fit
    are left unschedulable, never bound past a node's room."""
    api.add_node(make_node("n0", cpu="2"))
    api.add_node(make_node("n1", cpu="2"))
    api.add_node(make_node("n2", cpu="1"))
    api.add_pod(make_pod("fill", cpu="1", node="n2"))
    for i in range(3):
        api.add_pod(make_pod(f"r{i}", cpu="1500m", scheduler="iro", labels={"app": "db"}, affinity=anti("db")))
    s = make_scheduler(kubeconfig, clock)
    try:
        settle(s, limit=10)
    finally:
        s.stop()
    placed = nodes_of(api, "r")
    assert sorted(n for n in placed.values() if n) == ["n0", "n1"]


class CountingEvent(threading.Event):
    """The loop's stop event, counting the batching windows waited on it."""

    def __init__(self, window_s: float) -> None:
        super().__init__()
        self.window_s = window_s
        self.windows = 0

    def wait(self, timeout: float | None = None) -> bool:
        if timeout == self.window_s:
            self.windows += 1
        return super().wait(timeout)


def test_the_loop_does_not_wait_a_window_for_the_pods_it_deferred(api, kubeconfig):
    """web's affinity target is in its batch, and cache fills the one node of its zone: web is
    deferred, and its next batch (web alone) goes at once; the loop waited one window in all (two
    before)."""
    api.add_node(make_node("a0", cpu="1", zone="a"))
    api.add_node(make_node("b0", cpu="16", zone="b"))
    api.add_pod(make_pod("cache", cpu="1", scheduler="iro", labels={"app": "cache"}, node_selector={ZONE: "a"}, priority=5))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro", labels={"app": "web"}, affinity=affinity("cache")))
    s = IroScheduler(Kube.from_kubeconfig(kubeconfig), identity="w", leader_election=False, window_s=0.5)
    s._stop = CountingEvent(0.5)
    s.start()
    try:
        assert api.wait_for(lambda: s.batch_count >= 2, 30)
    finally:
        s.stop()
    assert {o.key: o.status for o in s.batches[0].pods} == {"default/cache": "bound", "default/web": "deferred"}
    assert {o.key: o.status for o in s.batches[1].pods} == {"default/web": "unschedulable"}
    assert s._stop.windows == 1


# --- _add_waiters: only the queued pods that wait for a bound pod added ---------------------------


def test_add_waiters_hold_only_waiting_pods(api, kubeconfig, clock):
    """Pods refused for pod affinity wait for a pod added; once bound (or deleted) they leave the set
    at once, not when some later pod add happens to prune them."""
    for z in "ab":
        api.add_node(make_node(f"{z}0", cpu="64", zone=z))
    api.add_pod(make_pod("lost", cpu="100m", scheduler="iro", labels={"app": "lost"}, affinity=affinity("nothing")))
    for i in range(5):
        api.add_pod(make_pod(f"w{i}", cpu="10m", memory="1Mi", scheduler="iro", labels={"app": "w"}, affinity=affinity("cache")))
    api.add_pod(make_pod("gone", cpu="10m", memory="1Mi", scheduler="iro", labels={"app": "g"}, affinity=affinity("cache2")))
    s = make_scheduler(kubeconfig, clock)
    try:
        first = cycle(s)
        assert {o.status for o in first.pods} == {"unschedulable"}
        assert s._add_waiters == {"default/lost", "default/gone", *(f"default/w{i}" for i in range(5))}
        api.add_pod(make_pod("cache", cpu="100m", node="a0", labels={"app": "cache"}))
        clock.advance(s.pod_max_backoff_s)
        second = cycle(s)
        assert Counter(o.status for o in second.pods) == {"bound": 5, "unschedulable": 2}
        assert s._add_waiters == {"default/lost", "default/gone"}  # right after the bindings
        api.delete("pods", "default/gone")
        s.pending._list()
        s.ready_pods()
        assert s._add_waiters == {"default/lost"}
        assert s._add_waiters <= set(s.queue_status())
    finally:
        s.stop()
