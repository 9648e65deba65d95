"""``iro scheduler`` against the loopback API server with the real kubernetes client."""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import pytest

import solvers
from iro_fed.k8s.client import Kube
from iro_fed.k8s.feedback import FeedbackLoop
from iro_fed.k8s.leader import LeaderElector
from iro_fed.k8s.quantity import cpu_millicores
from iro_fed.k8s.scheduler import IroScheduler
from iro_fed.k8s.testing import InjectedError, make_node, make_pod
from iro_fed.placement import Placement
from solvers.base import Solver, SolverProperties

FAST = {"window_s": 0.1, "lease_duration": 2, "renew_deadline": 1.5, "retry_period": 0.2, "watch_timeout_s": 5}


class _Broken(Solver):
    """A solver that always fails (to exercise the fallback)."""

    name = "test-broken-k8s"
    properties = SolverProperties("batch", False, "always raises")
    parameters: ClassVar[dict] = {}

    def _solve(self, problem, deadline) -> Placement:
        raise RuntimeError("out of licences")


def scheduler(kubeconfig: str, identity: str, **kw: Any) -> IroScheduler:
    kube = Kube.from_kubeconfig(kubeconfig, user_agent=f"iro-scheduler/{identity}")
    return IroScheduler(kube, identity=identity, **{**FAST, **kw})


def node_of(api, name: str) -> str | None:
    pod = api.get("pods", f"default/{name}")
    return pod["spec"].get("nodeName") if pod else None


def condition(api, name: str) -> dict | None:
    conds = api.get("pods", f"default/{name}")["status"].get("conditions") or []
    return next((c for c in conds if c["type"] == "PodScheduled"), None)


def events_for(api, name: str) -> list[dict]:
    return [e for e in api.list("events") if e["involvedObject"]["name"] == name]


def test_a_batch_is_solved_bound_and_explained(api, kubeconfig):
    for i in range(3):
        api.add_node(make_node(f"n{i}", cpu="8", memory="8Gi", zone=f"z{i % 2}"))
    api.add_pod(make_pod("other", cpu="1"))  # another scheduler's pod: never touched
    names = [f"web-{i}" for i in range(5)]
    for n in names:
        api.add_pod(make_pod(n, cpu="1500m", memory="1Gi", scheduler="iro"))
    api.add_pod(make_pod("huge", cpu="12", scheduler="iro"))
    s = scheduler(kubeconfig, "a").start()
    try:
        assert api.wait_for(lambda: all(node_of(api, n) for n in names) and condition(api, "huge"), 15)
    finally:
        s.stop()
    # capacity holds on every node
    used: dict[str, int] = {}
    for n in names:
        used[node_of(api, n)] = used.get(node_of(api, n), 0) + 1500
    assert all(v <= 8000 for v in used.values())
    # one Binding POST per pod, all accepted
    posts = api.requests_to("POST", r"/binding$")
    assert len(posts) == 5 and all(r["status"] == 201 for r in posts)
    assert node_of(api, "other") is None and condition(api, "other") is None
    # every bound pod has an explanation event: change of R, terms, runner-up and gap
    for n in names:
        (ev,) = [e for e in events_for(api, n) if e["reason"] == "Scheduled"]
        assert ev["type"] == "Normal" and f"to {node_of(api, n)}" in ev["message"]
        assert "R +" in ev["message"] or "R -" in ev["message"]
        assert "runner-up n" in ev["message"] and "gap" in ev["message"]
        assert ev["source"]["component"] == "iro-scheduler"
    # the pod that fits nowhere: PodScheduled=False, Unschedulable, kube's message, an event
    cond = condition(api, "huge")
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["message"] == "0/3 nodes are available: 3 Insufficient cpu."
    assert [e["reason"] for e in events_for(api, "huge")] == ["FailedScheduling"]
    outcome = {o.key: o for b in s.batches for o in b.pods}
    assert outcome["default/web-0"].runner_up is not None and outcome["default/web-0"].gap is not None
    assert set(outcome["default/web-0"].terms) == {"utilization", "latency", "cost", "carbon", "unplaced"}


def test_unschedulable_pod_is_placed_once_the_cluster_changes(api, kubeconfig):
    api.add_node(make_node("small", cpu="2"))
    api.add_pod(make_pod("big", cpu="6", scheduler="iro"))
    s = scheduler(kubeconfig, "a").start()
    try:
        assert api.wait_for(lambda: condition(api, "big") is not None, 10)
        assert node_of(api, "big") is None
        api.add_node(make_node("large", cpu="16"))
        assert api.wait_for(lambda: node_of(api, "big") == "large", 10)
    finally:
        s.stop()
    assert condition(api, "big")["status"] == "True"


def test_solver_failure_falls_back_to_a_heuristic(api, kubeconfig, monkeypatch):
    # registered for this test only, so the conformance suite never sees it
    monkeypatch.setitem(solvers._REGISTRY, _Broken.name, _Broken)
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("p", cpu="1", scheduler="iro"))
    s = scheduler(kubeconfig, "a", solver="test-broken-k8s", fallback="kube-default").start()
    try:
        assert api.wait_for(lambda: node_of(api, "p") == "n0", 10)
    finally:
        s.stop()
    batch = s.batches[0]
    assert batch.solved_by == "kube-default"
    assert "out of licences" in batch.fallback_reason


def test_invalid_pod_does_not_block_the_batch(api, kubeconfig):
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("bad", cpu="one", scheduler="iro"))
    api.add_pod(make_pod("good", cpu="1", scheduler="iro"))
    s = scheduler(kubeconfig, "a").start()
    try:
        assert api.wait_for(lambda: node_of(api, "good") == "n0" and condition(api, "bad") is not None, 10)
    finally:
        s.stop()
    cond = condition(api, "bad")
    assert cond["reason"] == "SchedulerError" and "invalid quantity 'one'" in cond["message"]


@pytest.mark.parametrize(("field", "value"), [("priority", "high"), ("priority", [1]), ("creationTimestamp", 5)])
def test_a_malformed_queue_field_does_not_stop_the_queue(api, kubeconfig, field, value):
    # The queue sorts by priority and creation time before any pod is checked; a bad value
    # there once raised in the sort, so no pod at all was scheduled.
    api.add_node(make_node("n0", cpu="4"))
    bad = make_pod("bad", cpu="1", scheduler="iro")
    if field == "priority":
        bad["spec"]["priority"] = value
    else:
        bad["metadata"]["creationTimestamp"] = value
    api.add_pod(bad)
    api.add_pod(make_pod("good", cpu="1", scheduler="iro"))
    s = scheduler(kubeconfig, "a").start()
    try:
        assert api.wait_for(lambda: node_of(api, "good") == "n0", 10)
    finally:
        s.stop()
    if field == "priority":  # the batch names what is wrong with the pod
        assert api.wait_for(lambda: condition(api, "bad") is not None, 5)
        assert "spec.priority" in condition(api, "bad")["message"]


def test_a_binding_conflict_is_not_retried(api, kubeconfig):
    api.add_node(make_node("n0", cpu="8"))

    def conflict(ns, name, body):
        if name == "raced":
            raise InjectedError(409, "Conflict", 'pod raced is already assigned to node "elsewhere"')

    api.binding_hook = conflict
    api.add_pod(make_pod("raced", cpu="1", scheduler="iro"))
    s = scheduler(kubeconfig, "a").start()
    try:
        assert api.wait_for(lambda: len(api.requests_to("POST", "/pods/raced/binding$")) == 1, 10)
        for i in range(3):  # more batches come and go
            api.add_pod(make_pod(f"later-{i}", cpu="1", scheduler="iro"))
            assert api.wait_for(lambda i=i: node_of(api, f"later-{i}") == "n0", 10)
    finally:
        s.stop()
    assert len(api.requests_to("POST", "/pods/raced/binding$")) == 1
    assert [o.status for b in s.batches for o in b.pods if o.key == "default/raced"] == ["conflict"]


def test_two_replicas_never_both_bind_and_the_follower_takes_over(api, kubeconfig):
    for i in range(3):
        api.add_node(make_node(f"n{i}", cpu="8", zone=f"z{i}"))
    timing = {"lease_duration": 3, "renew_deadline": 2.0, "retry_period": 0.2}
    a = scheduler(kubeconfig, "replica-a", **timing).start()
    b = scheduler(kubeconfig, "replica-b", **timing).start()
    # Watch the invariant the whole time: a replica binds only while is_leader(), and the two are
    # never leader at once.
    both, done = [], threading.Event()

    def watch() -> None:
        while not done.is_set():
            if a.is_leader() and b.is_leader():
                both.append(time.monotonic())
            done.wait(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert api.wait_for(lambda: a.is_leader() or b.is_leader(), 10)
        for i in range(8):
            api.add_pod(make_pod(f"p{i}", cpu="500m", scheduler="iro"))
        assert api.wait_for(lambda: all(node_of(api, f"p{i}") for i in range(8)), 15)
        # the server logs a request after it has applied it: wait for the log, then count
        api.wait_for(lambda: len(api.requests_to("POST", "/binding$")) >= 8, 5)
        posts = api.requests_to("POST", "/binding$")
        assert len(posts) == 8 and {r["status"] for r in posts} == {201}  # one Binding per pod, none refused
        # the leader dies without giving the lease up; the other waits it out, then binds
        assert api.wait_for(lambda: a.is_leader() or b.is_leader(), 10)
        leader, follower = (a, b) if a.is_leader() else (b, a)
        lease = api.get("leases", "iro-system/iro-scheduler")
        assert lease["spec"]["holderIdentity"] == leader.identity and lease["spec"]["leaseDurationSeconds"] == 3
        leader.stop(release=False)
        api.add_pod(make_pod("after", cpu="500m", scheduler="iro"))
        assert api.wait_for(lambda: node_of(api, "after") is not None, 20)
        after = [r for r in api.requests_to("POST", "/binding$") if r["path"].endswith("/after/binding")]
        assert [r["user_agent"] for r in after] == [f"iro-scheduler/{follower.identity}"]
        assert api.get("leases", "iro-system/iro-scheduler")["spec"]["holderIdentity"] == follower.identity
    finally:
        done.set()
        watcher.join()
        a.stop()
        b.stop()
    assert both == []
    posts = sorted(api.requests_to("POST", "/binding$"), key=lambda r: r["time"])
    assert all(r["status"] == 201 for r in posts)
    # never both: in time order the binding replica changes at most twice (a possible hand-over
    # under load before the crash, and the crash), and never back and forth in between
    agents = [r["user_agent"] for r in posts]
    switches = sum(x != y for x, y in zip(agents, agents[1:], strict=False))
    assert switches <= 2 and len(set(agents)) == 2
    # lease writes that lost a race were refused with 409, never both accepted
    assert all(r["status"] in (200, 201, 409) for r in api.requests_to("PUT|POST", "/leases"))


def test_leader_release_on_clean_stop_hands_over_quickly(api, kube):
    a = LeaderElector(kube, "l", "iro-system", "a", lease_duration=30, renew_deadline=20, retry_period=0.2).start()
    assert a.wait_leader(10)
    b = LeaderElector(kube, "l", "iro-system", "b", lease_duration=30, renew_deadline=20, retry_period=0.2).start()
    try:
        assert not b.wait_leader(0.6)  # a holds a 30 s lease
        a.stop(release=True)
        assert not a.is_leader()
        assert b.wait_leader(10)  # no 30 s wait: the lease was released
    finally:
        a.stop(release=False)
        b.stop()


def test_elector_checks_its_timing_settings(kube):
    with pytest.raises(ValueError, match="greater than renew_deadline"):
        LeaderElector(kube, "l", "ns", "a", lease_duration=5, renew_deadline=5, retry_period=1)
    with pytest.raises(ValueError, match="1.2 x retry_period"):
        LeaderElector(kube, "l", "ns", "a", lease_duration=15, renew_deadline=2, retry_period=2)
    with pytest.raises(ValueError, match="whole seconds"):
        LeaderElector(kube, "l", "ns", "a", lease_duration=2.5, renew_deadline=1, retry_period=0.2)


def test_feedback_loop_records_predictions_for_placements(api, kubeconfig):
    api.add_node(make_node("n0", cpu="4"))
    fb = FeedbackLoop(threshold=0.1, min_samples=3)
    s = scheduler(kubeconfig, "a", feedback=fb)
    s.start()
    try:
        for i in range(2):
            api.add_pod(make_pod(f"p{i}", cpu="1", scheduler="iro"))
        assert api.wait_for(lambda: node_of(api, "p0") and node_of(api, "p1"), 10)
    finally:
        s.stop()
    pred = fb.latest["n0"]
    assert pred.capacity_cpu == cpu_millicores("4")
    assert pred.requested_cpu in (1000.0, 2000.0)
    assert pred.predicted_util == pytest.approx(pred.requested_cpu / 4000.0)
    assert fb.observe("n0", 0.5) == pytest.approx(abs(0.5 - pred.predicted_util))


def test_a_failed_bind_is_tried_again_in_a_later_batch_after_a_backoff(api, kubeconfig):
    api.add_node(make_node("n0", cpu="4"))
    calls = []

    def flaky(ns, name, body):
        calls.append(name)
        if len(calls) == 1:
            raise InjectedError(500, "InternalError", "etcdserver: request timed out")

    api.binding_hook = flaky
    api.add_pod(make_pod("flaky", cpu="1", scheduler="iro"))
    s = scheduler(kubeconfig, "a").start()
    try:
        assert api.wait_for(lambda: node_of(api, "flaky") == "n0", 15)
    finally:
        s.stop()
    assert [r["status"] for r in api.requests_to("POST", "/pods/flaky/binding$")] == [500, 201]
    assert [o.status for b in s.batches for o in b.pods] == ["bind-error", "bound"]


def test_feedback_from_node_metrics_detects_drift_and_refits(api, kubeconfig):
    """Pods use 80 % more CPU than they request: metrics-server's NodeMetrics show it, the moving
    error passes the threshold, the usage model is refitted and predictions match again."""
    for i in range(3):
        api.add_node(make_node(f"n{i}", cpu="8"))
    fired = []
    fb = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=3, on_drift=fired.append)
    s = scheduler(kubeconfig, "a", feedback=fb, metrics_poll_s=3600)  # polled by hand below
    s.start()
    try:
        for i in range(6):
            api.add_pod(make_pod(f"p{i}", cpu="1500m", scheduler="iro"))
        assert api.wait_for(lambda: all(node_of(api, f"p{i}") for i in range(6)), 15)
        assert api.wait_for(lambda: len(fb.latest) == len({node_of(api, f"p{i}") for i in range(6)}), 10)
        requested = {n: 0 for n in ("n0", "n1", "n2")}
        for i in range(6):
            requested[node_of(api, f"p{i}")] += 1500
        # Each poll reads a new scrape (a minute later: metrics-server serves one scrape until
        # the next, and the feed counts each once), after every placement.
        scrape = iter(range(1, 100))

        def scraped(factor: float) -> None:
            at = time.time() + 60 * next(scrape)
            for n, m in requested.items():
                api.set_node_metrics(n, f"{int(m * factor)}m", at=at)

        # calibrated first: usage equals requests
        for _ in range(2):
            scraped(1.0)
            assert s.metrics_feed.poll() == len(fb.latest)
        assert s.metrics_feed.poll() == 0  # the same scrape read again is not a new observation
        assert fb.signals == [] and fb.moving_error < 0.01
        # then the shift
        for _ in range(6):  # the moving error decays with the refitted model's (near zero) errors
            scraped(1.8)
            s.metrics_feed.poll()
    finally:
        s.stop()
    assert len(fired) == 1
    assert fired[0].factor_after == pytest.approx(1.8, abs=0.01)
    assert fb.moving_error < 0.01
