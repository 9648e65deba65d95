"""An assumed pod stops counting on its node only on evidence, not after 60 s (soak audit h6).

Before, ``ASSUME_TTL_S = 60`` forgot a pod bound here that the bound-pods watch had not shown
within 60 s, while a watch that went silent (a proxy that dropped its connection) is taken for
dead only after its timeoutSeconds plus a read timeout (up to ~3 min): a second pod was bound
into the room of the first (node n0 of 1 CPU, two pods of 1 CPU each). Now an assumed pod is
settled by the watch (shown bound or deleted) or by a list of the bound pods started after its
Binding; a safety TTL (10 min by default) is the last resort. The scheduler is driven by hand on
a fake clock: a reflector whose list is not called is a watch that delivers nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path

from iro_fed.k8s.client import Kube
from iro_fed.k8s.scheduler import BATCHES_KEPT, POOL_SPARE, BatchResult, IroScheduler, PodOutcome
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from tests.k8s.helpers import Clock, make_scheduler


def _names(pods: list[dict]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def _schedule(s: IroScheduler) -> list[tuple[str, str, str | None]]:
    s.pending._list()
    return [(o.key, o.status, o.node) for o in s.schedule_batch(s.ready_pods()).pods]


def _one_cpu_node(api: FakeApiServer) -> None:
    api.add_node(make_node("n0", cpu="1", memory="4Gi"))
    api.add_pod(make_pod("a", cpu="1", memory="1Gi", scheduler="iro"))


def test_a_silent_bound_pods_watch_does_not_free_the_room_of_an_assumed_pod(
    api: FakeApiServer, kubeconfig: str, clock: Clock
):
    _one_cpu_node(api)
    s = make_scheduler(kubeconfig, clock)
    try:
        assert _schedule(s) == [("default/a", "bound", "n0")]
        clock.advance(65)  # the bound-pods watch delivers nothing for 65 s (no list, no event)
        api.add_pod(make_pod("b", cpu="1", memory="1Gi", scheduler="iro"))
        assert _schedule(s) == [("default/b", "unschedulable", None)]  # was ("default/b", "bound", "n0")
        assert [p["metadata"]["name"] for p in api.list("pods") if p["spec"].get("nodeName") == "n0"] == ["a"]
        # The watch comes back (relisted): a counts from the store now (a pod added moves no pod).
        s.cache.pods._list()
        clock.advance(20)
        s.pending._list()
        assert s.ready_pods() == [] and not s._assumed
        assert [(o.key, o.status) for o in s.schedule_batch([api.get("pods", "default/b")]).pods] == [
            ("default/b", "unschedulable")
        ]
    finally:
        s.stop()


def test_a_list_started_after_the_binding_that_lacks_the_pod_frees_its_room(
    api: FakeApiServer, kubeconfig: str, clock: Clock
):
    _one_cpu_node(api)
    s = make_scheduler(kubeconfig, clock)
    try:
        assert _schedule(s) == [("default/a", "bound", "n0")]
        api.delete("pods", "default/a")  # deleted before the bound-pods view ever showed it
        api.add_pod(make_pod("b", cpu="1", memory="1Gi", scheduler="iro"))
        assert _schedule(s) == [("default/b", "unschedulable", None)]
        s.cache.pods._list()  # a consistent list, started after a's Binding, without a: evidence
        clock.advance(1)  # b's backoff
        s.pending._list()
        assert _names(s.ready_pods()) == ["b"]  # on the old code: [] until 60 s had passed
        assert _schedule(s) == [("default/b", "bound", "n0")]
    finally:
        s.stop()


def test_a_list_started_before_the_binding_ended_is_no_evidence(api: FakeApiServer, kubeconfig: str, clock: Clock):
    _one_cpu_node(api)
    s = make_scheduler(kubeconfig, clock)
    try:
        api.binding_hook = lambda ns, name, body: s.cache.pods._list()  # a list runs during the POST
        assert _schedule(s) == [("default/a", "bound", "n0")]
        api.binding_hook = None
        api.add_pod(make_pod("b", cpu="1", memory="1Gi", scheduler="iro"))
        s.pending._list()
        s.ready_pods()
        assert list(s._assumed) == ["default/a"]
        assert _schedule(s) == [("default/b", "unschedulable", None)]
    finally:
        s.stop()


def test_a_pod_the_watch_shows_added_and_deleted_between_two_passes_stops_counting(
    api: FakeApiServer, kubeconfig: str, clock: Clock
):
    """The watch delivered a's ADDED and DELETED before the loop read the store again: the old
    code never saw a in the store and counted it for 60 s more."""
    _one_cpu_node(api)
    s = make_scheduler(kubeconfig, clock)
    s.cache.pods.start()  # the bound-pods watch runs; the rest is driven by hand
    try:
        assert api.wait_for(lambda: api.open_watches("pods") == 1, 10)  # listed, and watching
        start = s.cache.pods.version
        api.add_pod(make_pod("b", cpu="1", memory="1Gi", scheduler="iro"))
        s.pending._list()
        assert sorted((o.key, o.status) for o in s.schedule_batch(s.ready_pods()).pods) == [
            ("default/a", "bound"),
            ("default/b", "unschedulable"),
        ]
        api.delete("pods", "default/a")
        with s.cache.pods.changed:  # the watch delivered the delete (its ADDED came before)
            assert s.cache.pods.changed.wait_for(
                lambda: s.cache.pods.version >= start + 2 and "default/a" not in s.cache.pods.store, 20
            )
        clock.advance(1)
        assert _schedule(s) == [("default/b", "bound", "n0")]
    finally:
        s.stop()


def test_the_safety_ttl_ends_an_assumption_with_no_evidence_and_logs_it(
    api: FakeApiServer, kubeconfig: str, clock: Clock, caplog
):
    _one_cpu_node(api)
    s = make_scheduler(kubeconfig, clock, assume_ttl_s=300)
    try:
        assert _schedule(s) == [("default/a", "bound", "n0")]
        api.delete("pods", "default/a")
        api.add_pod(make_pod("b", cpu="1", memory="1Gi", scheduler="iro"))
        assert _schedule(s) == [("default/b", "unschedulable", None)]
        clock.advance(299)
        assert _schedule(s) == []  # b waits (no cluster change), a still counts
        assert list(s._assumed) == ["default/a"]
        clock.advance(2)
        with caplog.at_level(logging.WARNING, logger="iro_fed.k8s.scheduler"):
            assert _names(s.ready_pods()) == ["b"]
        assert "safety TTL" in caplog.text
    finally:
        s.stop()


def test_the_default_safety_ttl_outlasts_the_watches_longest_silence(kubeconfig: str):
    kube = Kube.from_kubeconfig(kubeconfig)
    assert IroScheduler(kube, leader_election=False).assume_ttl_s >= 600
    # a watch of up to 2 x 300 s, then a read of 60 s and a list of 60 s: twice that
    assert IroScheduler(kube, leader_election=False, watch_timeout_s=300).assume_ttl_s == 2 * (600 + 120)


def test_a_pod_bound_here_is_not_bound_again_while_the_pending_watch_lags(
    api: FakeApiServer, kubeconfig: str, clock: Clock
):
    """The pending-pods watch is late (not relisted): a pod bound here, shown bound and then deleted
    by the bound-pods watch, got a second Binding (404) on the old code."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("a", cpu="1", scheduler="iro"))
    s = make_scheduler(kubeconfig, clock)
    try:
        assert _schedule(s) == [("default/a", "bound", "n0")]
        s.pending._list = lambda: ""  # the pending-pods watch delivers nothing from now on
        s.cache.pods._list()
        assert s.ready_pods() == [] and not s._assumed  # confirmed
        api.delete("pods", "default/a")
        s.cache.pods._list()
        clock.advance(120)
        assert s.ready_pods() == []  # on the old code: [a], then a Binding answered 404
        assert len(api.requests_to("POST", "/binding$")) == 1
    finally:
        s.stop()


def test_a_409_pod_is_not_bound_again_after_60_s_while_the_pending_watch_lags(
    api: FakeApiServer, kubeconfig: str, clock: Clock
):
    api.add_node(make_node("n0", cpu="4"))
    api.add_node(make_node("n1", cpu="4"))
    api.add_pod(make_pod("a", cpu="1", scheduler="iro"))
    s = make_scheduler(kubeconfig, clock)
    try:
        s.pending._list()
        ready = s.ready_pods()
        pod = api.get("pods", "default/a")
        pod["spec"]["nodeName"] = "n1"  # bound by someone else meanwhile
        api.update("pods", pod)
        assert [o.status for o in s.schedule_batch(ready).pods] == ["conflict"]
        clock.advance(65)
        assert s.ready_pods() == []  # on the old code: [a] again, and one more 409 per minute
    finally:
        s.stop()


def test_batches_keeps_the_latest_results_and_counts_them_all(kubeconfig: str):
    s = IroScheduler(Kube.from_kubeconfig(kubeconfig), leader_election=False)
    for i in range(BATCHES_KEPT + 50):
        s._record(BatchResult([PodOutcome(f"default/p{i}", "n0", "bound", "")], "greedy", "greedy", None, None, 0.5))
    assert len(s.batches) == BATCHES_KEPT
    assert s.batches[-1].pods[0].key == f"default/p{BATCHES_KEPT + 49}"
    assert (s.batch_count, s.solve_s_total) == (BATCHES_KEPT + 50, 0.5 * (BATCHES_KEPT + 50))


def test_the_running_loop_bounds_batches(api: FakeApiServer, kubeconfig: str, monkeypatch):
    monkeypatch.setattr("iro_fed.k8s.scheduler.BATCHES_KEPT", 3)
    api.add_node(make_node("n0", cpu="64", memory="64Gi"))
    s = IroScheduler(Kube.from_kubeconfig(kubeconfig), leader_election=False, window_s=0).start()
    try:
        for i in range(6):
            api.add_pod(make_pod(f"p{i}", cpu="100m", scheduler="iro"))
            assert api.wait_for(lambda i=i: api.get("pods", f"default/p{i}")["spec"].get("nodeName"), 20)
        assert api.wait_for(lambda: s.batch_count >= 6, 20)
        assert len(s.batches) == 3
    finally:
        s.stop()


def test_the_client_pool_holds_every_thread_of_the_scheduler(kubeconfig: str, tmp_path: Path):
    kube = Kube.from_kubeconfig(kubeconfig)
    kube.api.configuration.connection_pool_maxsize = 10  # the client's default on 2 CPUs
    kube.api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 10
    IroScheduler(kube, leader_election=False, bind_workers=8)
    assert kube.api.rest_client.pool_manager.connection_pool_kw["maxsize"] >= 8 + 4
    assert kube.api.configuration.connection_pool_maxsize == 8 + POOL_SPARE
    pool = kube.api.rest_client.pool_manager.connection_from_url(kube.api.configuration.host)
    assert pool.pool.maxsize == 8 + POOL_SPARE
