"""``iro scheduler`` wakes on the cluster changes that can fit an unschedulable pod.

Before, only the pending-pods watch and the lease woke its loop: a node added or grown, or a
bound pod deleted, was noticed at the next poll (1 s, fixed). kube-scheduler moves unschedulable
pods on such events at once (``MoveAllToActiveOrBackoffQueue``), pods still in backoff waiting
it out. Here the poll is an hour and the 5-minute flush a day, so a pod that gets bound within the
test's wait was woken by the change itself; nothing depends on how fast the machine is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from iro_fed.k8s.client import Kube
from iro_fed.k8s.scheduler import ASSUME_TTL_S, IroScheduler
from iro_fed.k8s.testing import FakeApiServer, InjectedError, make_node, make_pod
from tests.k8s.helpers import Clock

HOUR = 3600.0
SLOW = {"poll_s": HOUR, "max_unschedulable_s": 24 * HOUR, "window_s": 0, "leader_election": False,
        "watch_timeout_s": 5}


@pytest.fixture
def start(kubeconfig: str) -> Iterator[Callable[..., IroScheduler]]:
    """``start(**settings)``: a started scheduler (SLOW unless overridden), stopped after the test."""
    started: list[IroScheduler] = []

    def make(**kw: Any) -> IroScheduler:
        kube = Kube.from_kubeconfig(kubeconfig, user_agent="iro-scheduler/wake")
        s = IroScheduler(kube, identity="wake", **{**SLOW, **kw}).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def node_of(api: FakeApiServer, name: str) -> str | None:
    pod = api.get("pods", f"default/{name}")
    return pod["spec"].get("nodeName") if pod else None


def wait_unschedulable(api: FakeApiServer, s: IroScheduler, name: str) -> None:
    """Until ``name``'s failed attempt is queued and reported, its batch recorded, and the
    report seen by the pending watch (the last event that wakes the loop on its own) and taken
    by the loop. This only makes it likely that the loop sleeps when the test's change comes,
    so that without the fix the change is missed; with it nothing here is needed."""
    key = f"default/{name}"
    assert api.wait_for(lambda: _reported_in(api.get("pods", key)), 20), f"{name} was never reported unschedulable"
    assert api.wait_for(lambda: key in s.queue_status() and s.batches, 20)
    with s.pending.changed:
        assert s.pending.changed.wait_for(lambda: _reported_in(s.pending.store.get(key)), 20)
    assert api.wait_for(lambda: not s._wake.is_set(), 20)


def _reported_in(pod: dict[str, Any] | None) -> bool:
    conds = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)


def _add_node(api: FakeApiServer) -> None:
    api.add_node(make_node("n1", cpu="8"))


def _grow_node(api: FakeApiServer) -> None:
    node = api.get("nodes", "n0")
    node["status"]["allocatable"]["cpu"] = node["status"]["capacity"]["cpu"] = "8"
    api.update("nodes", node)


def _delete_bound_pod(api: FakeApiServer) -> None:
    api.delete("pods", "default/hog")


@pytest.mark.parametrize(("change", "node"), [(_add_node, "n1"), (_grow_node, "n0"), (_delete_bound_pod, "n0")],
                         ids=["node-added", "node-grown", "bound-pod-deleted"])
def test_a_cluster_change_wakes_the_loop_for_an_unschedulable_pod(api, start, change, node):
    # n0 has 4 CPUs, 3 of them taken by a bound pod: the 2-CPU pod fits nowhere.
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("hog", cpu="3", node="n0"))
    api.add_pod(make_pod("p", cpu="2", scheduler="iro"))
    # A backoff of 1 ms is over before the change comes: only a wake can bring the pod back.
    s = start(pod_initial_backoff_s=0.001, pod_max_backoff_s=0.001)
    wait_unschedulable(api, s, "p")
    assert node_of(api, "p") is None
    change(api)
    assert api.wait_for(lambda: node_of(api, "p") == node, 20), "the change did not wake the scheduler"
    assert api.wait_for(lambda: len(s.batches) == 2, 20)  # the batch is recorded after its Bindings
    assert [o.status for b in s.batches for o in b.pods] == ["unschedulable", "bound"]


def test_a_change_of_an_unrelated_bound_pod_wakes_it_too_but_it_stays_unschedulable(api, start):
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("hog", cpu="3", node="n0"))
    api.add_pod(make_pod("other", cpu="100m", node="n0"))
    api.add_pod(make_pod("p", cpu="2", scheduler="iro"))
    s = start(pod_initial_backoff_s=0.001, pod_max_backoff_s=0.001)
    wait_unschedulable(api, s, "p")
    api.delete("pods", "default/other")  # 100m freed: still no room for 2 CPUs
    # Tried again (as kube moves it on any assigned-pod delete), and failed the same way.
    assert api.wait_for(lambda: len(s.batches) >= 2, 20)
    assert [o.status for b in s.batches for o in b.pods] == ["unschedulable", "unschedulable"]
    assert s.queue_status()["default/p"]["attempts"] == 2
    _delete_bound_pod(api)
    assert api.wait_for(lambda: node_of(api, "p") == "n0", 20)


def test_a_pod_in_backoff_still_waits_it_out(api, start):
    api.add_node(make_node("n0", cpu="1"))
    api.add_pod(make_pod("p", cpu="2", scheduler="iro"))
    bound_at: list[float] = []
    s = start(pod_initial_backoff_s=2.0, pod_max_backoff_s=2.0)
    api.binding_hook = lambda ns, name, body: bound_at.append(s.clock())
    wait_unschedulable(api, s, "p")
    with s._lock:
        queued = s._unschedulable["default/p"]
    api.add_node(make_node("n1", cpu="8"))  # most likely within the 2 s backoff; later is fine too
    assert api.wait_for(lambda: node_of(api, "p") == "n1", 20)
    # woken by the node, it was still tried only once its backoff was over (and by the backoff
    # timer, not the hour-long poll)
    assert len(bound_at) == 1 and bound_at[0] >= queued.retry_at


# --- how long the loop sleeps (no thread: a fake clock, lists taken by hand) ---------------------


def queued(kubeconfig: str, clock: Clock, **kw: Any) -> IroScheduler:
    s = IroScheduler(Kube.from_kubeconfig(kubeconfig), identity="wake", clock=clock, **{**SLOW, **kw})
    for reflector in (s.cache.nodes, s.cache.pods, s.pending):
        reflector._list()
    return s


def solve(s: IroScheduler) -> list[str]:
    s.pending._list()
    pods = s.ready_pods()
    if pods:
        s.batches.append(s.schedule_batch(pods))
    return [o.status for o in s.batches[-1].pods] if pods else []


def test_the_loop_sleeps_until_the_next_timer_or_poll_s(api, kubeconfig):
    clock = Clock()
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("big", cpu="8", scheduler="iro"))
    s = queued(kubeconfig, clock, max_unschedulable_s=300)
    try:
        assert s._next_wake_s() == HOUR  # nothing queued: the poll alone
        assert solve(s) == ["unschedulable"]
        assert s._next_wake_s() == pytest.approx(1.0)  # its backoff
        clock.advance(1.0)
        assert s._next_wake_s() == pytest.approx(299.0)  # backoff over: the 5-min flush
        clock.advance(299.0)
        assert solve(s) == ["unschedulable"]  # flushed
        api.delete("pods", "default/big")
        s.pending._list()
        s.ready_pods()  # gone from the queue
        assert s._next_wake_s() == HOUR
        # a failed Binding backs off 1 s: that wakes the loop too (it waited on the 1 s poll before)
        api.add_pod(make_pod("small", cpu="1", scheduler="iro"))
        api.binding_hook = _fail_once()
        assert solve(s) == ["bind-error"]
        assert s._next_wake_s() == pytest.approx(1.0)
        clock.advance(1.0)
        assert solve(s) == ["bound"]
        # assumed until the bound-pods watch shows it, ASSUME_TTL_S at most
        assert s._next_wake_s() == pytest.approx(ASSUME_TTL_S)
        s.cache.pods._list()
        s.pending._list()
        s.ready_pods()
        assert s._next_wake_s() == HOUR
    finally:
        s.stop()


def _fail_once() -> Callable[[str, str, dict[str, Any]], None]:
    calls: list[str] = []

    def hook(ns: str, name: str, body: dict[str, Any]) -> None:
        calls.append(name)
        if len(calls) == 1:
            raise InjectedError(500, "InternalError", "etcd timed out")

    return hook


def test_poll_s_defaults_to_one_second(kubeconfig):
    s = IroScheduler(Kube.from_kubeconfig(kubeconfig), leader_election=False)
    try:
        assert s.poll_s == 1.0 and s._next_wake_s() == 1.0
    finally:
        s.stop()


@pytest.mark.parametrize("poll_s", [0, -1, math.nan, math.inf, 1e300])
def test_a_bad_poll_s_is_refused_by_name(kubeconfig, poll_s):
    with pytest.raises(ValueError, match=r"^poll_s: must be > 0"):
        IroScheduler(Kube.from_kubeconfig(kubeconfig), leader_election=False, poll_s=poll_s)


def test_the_cluster_cache_builds_no_models_of_its_own(api, start):
    """The scheduler solves on a model it builds itself (with the pods it assumed bound), so its
    cache must not rebuild one in the background after every change (it did, every 0.5 s while
    pods churned, and nothing read it)."""
    api.add_node(make_node("n0", cpu="8"))
    for i in range(3):
        api.add_pod(make_pod(f"p{i}", cpu="1", scheduler="iro"))
    s = start()
    assert api.wait_for(lambda: all(node_of(api, f"p{i}") == "n0" for i in range(3)), 20)
    api.add_node(make_node("n1", cpu="8"))
    api.add_pod(make_pod("p3", cpu="1", scheduler="iro"))
    assert api.wait_for(lambda: node_of(api, "p3") is not None, 20)
    assert s.cache.refresh_s == 0 and s.cache.builds == 0


# --- review fixes ---------------------------------------------------------------------------------


def test_a_cluster_change_wakes_the_loop_only_for_a_pod_it_makes_ready(api, kubeconfig):
    """A pod still in its backoff is woken by its own timer (kube's backoffQ), so a change then
    must not wake the loop: the wake thread woke it for every node or bound-pod change (every
    status update of a running pod, in a real cluster) while any pod was queued."""
    clock = Clock()
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("big", cpu="8", scheduler="iro"))
    s = queued(kubeconfig, clock)
    try:
        assert solve(s) == ["unschedulable"]  # backoff 1 s
        api.add_node(make_node("n1", cpu="2"))
        s.cache.nodes._list()
        assert s._next_wake_s() == pytest.approx(1.0)  # its timer wakes the loop ...
        assert not s._ready_on_change()  # ... so the change does not (it did: a pod was queued)
        clock.advance(1.0)
        assert s._ready_on_change()  # backoff over: the change makes it ready
        assert s.ready_pods()
        assert solve(s) == ["unschedulable"]  # tried against this cluster: it waits again
        assert not s._ready_on_change()
    finally:
        s.stop()


def test_a_replica_that_does_not_lead_is_not_woken_by_cluster_changes(api, kubeconfig):
    clock = Clock()
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("big", cpu="8", scheduler="iro"))
    s = queued(kubeconfig, clock, leader_election=True)  # its elector never started: not the leader
    try:
        assert solve(s) == ["unschedulable"]  # queued while it led, say
        clock.advance(1.0)
        api.add_node(make_node("n1", cpu="2"))
        s.cache.nodes._list()
        # Its loop would only find it is not the leader; becoming leader wakes it anyway.
        assert not s.is_leader() and not s._ready_on_change()
    finally:
        s.stop()


def _always_fail(ns: str, name: str, body: dict[str, Any]) -> None:
    raise InjectedError(500, "InternalError", "etcd timed out")


def test_a_failed_binding_backs_off_doubling(api, kubeconfig):
    """1, 2, 4 ... s as documented: each entry was dropped when it ended, so every retry of a
    Binding that kept failing waited 1 s again."""
    clock = Clock()
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("p", cpu="1", scheduler="iro"))
    s = queued(kubeconfig, clock)
    try:
        api.binding_hook = _always_fail
        for delay in (1.0, 2.0, 4.0):
            assert solve(s) == ["bind-error"]
            assert s._next_wake_s() == pytest.approx(delay)
            clock.advance(delay - 0.5)
            assert s.ready_pods() == []  # still backing off
            clock.advance(0.5)
        api.binding_hook = None
        assert solve(s) == ["bound"]
        s.pending._list()
        s.ready_pods()
        assert "default/p" not in s._backoff  # gone with the pod
    finally:
        s.stop()


def test_a_batch_that_raises_backs_its_pods_off_instead_of_spinning(api, start, caplog):
    """A batch that raised left its pods ready, so the loop solved them again at once, for ever
    (window_s=0: a hot loop logging a traceback each time). Now they back off as after a failed
    Binding. The batch raises here because the model cannot read a node's allocatable cpu."""
    clock = Clock()
    node = make_node("n0", cpu="4")
    node["status"]["allocatable"]["cpu"] = "abc"
    api.add_node(node)
    api.add_pod(make_pod("p", cpu="1", scheduler="iro"))
    s = start(clock=clock)

    def failures() -> int:
        return sum("batch of 1 pods failed" in r.getMessage() for r in caplog.records)

    assert api.wait_for(lambda: failures() >= 1, 20)
    # The fake clock does not move: backing off, the pod is not tried again until it does.
    assert s.ready_pods() == [] and s._next_wake_s() == pytest.approx(1.0)
    clock.advance(1.0)
    s._wake.set()
    assert api.wait_for(lambda: failures() >= 2, 20)
    assert s._next_wake_s() == pytest.approx(2.0) and s.ready_pods() == []
    assert failures() == 2 and not s.batches


def test_start_twice_is_refused(api, start, kubeconfig):
    api.add_node(make_node("n0", cpu="4"))
    s = start()
    loop = s._thread
    with pytest.raises(RuntimeError, match="already started"):
        s.start()  # a second loop would solve and bind the same pods again
    assert s._thread is loop
    stopped = IroScheduler(Kube.from_kubeconfig(kubeconfig), leader_election=False)
    stopped.stop()
    with pytest.raises(RuntimeError, match="already started"):
        stopped.start()


@pytest.mark.parametrize("window_s", [-1, math.nan, math.inf, 1e300])
def test_a_bad_window_s_is_refused_by_name(kubeconfig, window_s):
    # nan was taken (as 0); inf and 1e300 made the loop's Event.wait raise OverflowError at the
    # first batch, which ended the scheduler's thread.
    with pytest.raises(ValueError, match=r"^window_s: must be >= 0"):
        IroScheduler(Kube.from_kubeconfig(kubeconfig), leader_election=False, window_s=window_s)
