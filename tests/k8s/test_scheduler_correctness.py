"""``iro scheduler`` against the API semantics kube-scheduler follows: pods being deleted are
skipped, a pod recreated under its old name is another pod (UID), repeated failures are reported
once, a 409 Binding is not retried blindly. Loopback API server, real kubernetes client."""

from __future__ import annotations

from typing import Any

from iro_fed.k8s.client import Kube
from iro_fed.k8s.quantity import cpu_millicores
from iro_fed.k8s.scheduler import IroScheduler
from iro_fed.k8s.testing import InjectedError, make_node, make_pod

FAST = {"window_s": 0.1, "lease_duration": 2, "renew_deadline": 1.5, "retry_period": 0.2, "watch_timeout_s": 5}


def scheduler(kubeconfig: str, identity: str = "a", **kw: Any) -> IroScheduler:
    kube = Kube.from_kubeconfig(kubeconfig, user_agent=f"iro-scheduler/{identity}")
    return IroScheduler(kube, identity=identity, **{**FAST, **kw})


def node_of(api, name: str) -> str | None:
    pod = api.get("pods", f"default/{name}")
    return pod["spec"].get("nodeName") if pod else None


def outcomes(s: IroScheduler, key: str) -> list[str]:
    return [o.status for b in list(s.batches) for o in b.pods if o.key == key]


def test_a_pod_being_deleted_is_not_bound(api, kubeconfig):
    # kube-scheduler skips pods with a deletionTimestamp; binding one puts a dying pod on a node.
    api.add_node(make_node("n0", cpu="4"))
    dying = make_pod("dying", cpu="1", scheduler="iro")
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    api.add_pod(dying)
    api.add_pod(make_pod("good", cpu="1", scheduler="iro"))
    s = scheduler(kubeconfig).start()
    try:
        assert api.wait_for(lambda: node_of(api, "good") == "n0" and s.batches, 10)
    finally:
        s.stop()
    assert node_of(api, "dying") is None
    assert api.requests_to("POST", "/pods/dying/binding$") == []
    assert outcomes(s, "default/dying") == []  # skipped, not reported unschedulable


def test_a_recreated_pod_of_the_same_name_does_not_confirm_the_assumed_one(api, kubeconfig):
    """A StatefulSet pod deleted and recreated under its name: while the bound-pods watch still
    shows the old pod, the new one, just bound elsewhere, must keep counting on its node."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_node(make_node("n1", cpu="4"))
    api.add_pod(make_pod("db-0", cpu="3", node="n0"))
    s = scheduler(kubeconfig, leader_election=False)
    try:
        # The watches are not running: the stores are lists taken at chosen moments, so the
        # bound-pods view lags the way a slow watch does, deterministically.
        s.cache.nodes._list()
        s.cache.pods._list()  # still shows the old db-0 on n0
        api.delete("pods", "default/db-0")
        api.add_pod(make_pod("db-0", cpu="3", scheduler="iro"))
        s.pending._list()
        first = s.schedule_batch(s.ready_pods())
        assert [(o.key, o.status, o.node) for o in first.pods] == [("default/db-0", "bound", "n1")]
        api.add_pod(make_pod("web", cpu="2", scheduler="iro"))
        s.pending._list()
        second = s.schedule_batch(s.ready_pods())
    finally:
        s.stop()
    assert [o.key for o in second.pods] == ["default/web"]
    # n1 holds the new db-0 (3 of 4 CPUs): web must not go there
    for node in ("n0", "n1"):
        used = sum(cpu_millicores(p["spec"]["containers"][0]["resources"]["requests"]["cpu"])
                   for p in api.list("pods") if p["spec"].get("nodeName") == node)
        assert used <= 4000, f"{node} double-booked: {used}m of 4000m"


def test_an_unchanged_failure_is_reported_once_while_the_cluster_churns(api, kubeconfig):
    """A cluster change that can fit pods (a node's labels) makes the scheduler retry an
    unschedulable pod once its backoff is over (short here); the same failure must not be patched
    and posted as a new Event on every retry."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("running", cpu="1", node="n0"))
    api.add_pod(make_pod("big", cpu="8", scheduler="iro"))
    s = scheduler(kubeconfig, pod_initial_backoff_s=0.05, pod_max_backoff_s=0.2).start()
    try:
        assert api.wait_for(lambda: len(outcomes(s, "default/big")) >= 1, 10)
        first = api.get("pods", "default/big")["status"]["conditions"][0]
        for i in range(3):
            node = api.get("nodes", "n0")
            node["metadata"]["labels"]["iro-test/churn"] = str(i)
            api.update("nodes", node)
            assert api.wait_for(lambda i=i: len(outcomes(s, "default/big")) >= i + 2, 10)
        failed = [e for e in api.list("events") if e["involvedObject"]["name"] == "big"]
        assert [e["reason"] for e in failed] == ["FailedScheduling"]
        assert len(api.requests_to("PATCH", "/pods/big/status$")) == 1
        # a different failure is reported, keeping the time the condition turned False
        api.add_node(make_node("n1", cpu="2"))
        assert api.wait_for(lambda: "0/2 nodes" in api.get("pods", "default/big")["status"]["conditions"][0]["message"], 10)
        assert api.wait_for(lambda: len([e for e in api.list("events") if e["involvedObject"]["name"] == "big"]) == 2, 10)
    finally:
        s.stop()
    cond = api.get("pods", "default/big")["status"]["conditions"][0]
    assert cond["status"] == "False" and cond["lastTransitionTime"] == first["lastTransitionTime"]
    assert len(api.requests_to("PATCH", "/pods/big/status$")) == 2


def test_a_409_blocks_only_that_pod_not_one_recreated_under_its_name(api, kubeconfig):
    api.add_node(make_node("n0", cpu="8"))
    old = api.add_pod(make_pod("db-0", cpu="1", scheduler="iro"))

    def conflict(ns, name, body):
        if body["metadata"].get("uid") == old["metadata"]["uid"]:
            raise InjectedError(409, "Conflict", "Precondition failed: UID in precondition")

    api.binding_hook = conflict
    s = scheduler(kubeconfig).start()
    try:
        assert api.wait_for(lambda: outcomes(s, "default/db-0") == ["conflict"], 10)
        api.delete("pods", "default/db-0")
        api.add_pod(make_pod("db-0", cpu="1", scheduler="iro"))  # a new UID
        assert api.wait_for(lambda: node_of(api, "db-0") == "n0", 10)
    finally:
        s.stop()
    assert outcomes(s, "default/db-0") == ["conflict", "bound"]


def test_a_pod_the_pending_watch_still_shows_but_is_bound_is_not_bound_again(api, kubeconfig):
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("p", cpu="1", scheduler="iro"))
    s = scheduler(kubeconfig, leader_election=False)
    try:
        s.cache.nodes._list()
        s.pending._list()  # p pending
        first = s.schedule_batch(s.ready_pods())
        assert [o.status for o in first.pods] == ["bound"]
        s.cache.pods._list()  # the bound-pods view shows p on n0; the pending view lags
        assert s.ready_pods() == []
    finally:
        s.stop()
    assert len(api.requests_to("POST", "/pods/p/binding$")) == 1


def test_a_binding_with_no_answer_times_out_is_not_retried_blindly_and_the_batch_goes_on(api, kubeconfig):
    """The API server applies the Binding but its answer never comes (a stalled connection). The
    client used to wait for ever, holding the batch; now the bind fails after the write timeout
    with status 0, the other pods of the batch are bound and the pod is not POSTed again: the
    watch shows it bound."""
    import threading

    api.add_node(make_node("n0", cpu="8"))
    release = threading.Event()

    def stall(ns, name, body):
        if name == "slow":
            pod = api.get("pods", "default/slow")
            pod["spec"]["nodeName"] = body["target"]["name"]  # applied ...
            api.update("pods", pod)
            release.wait(30)  # ... but unanswered

    api.binding_hook = stall
    api.add_pod(make_pod("slow", cpu="1", scheduler="iro"))
    api.add_pod(make_pod("fast", cpu="1", scheduler="iro"))
    s = scheduler(kubeconfig, bind_workers=1)
    s.kube.write_timeout_s = 0.5
    s.start()
    try:
        assert api.wait_for(lambda: outcomes(s, "default/slow") == ["bind-error"], 10)
        assert outcomes(s, "default/fast") == ["bound"]
        assert api.wait_for(lambda: "default/slow" in s.cache.pods.store, 10)
        api.add_pod(make_pod("later", cpu="1", scheduler="iro"))  # more batches come and go
        assert api.wait_for(lambda: outcomes(s, "default/later") == ["bound"], 10)
    finally:
        release.set()
        s.stop()
    (failed,) = [o for b in s.batches for o in b.pods if o.key == "default/slow"]
    assert "Timeout" in failed.message
    assert len(api.requests_to("POST", "/pods/slow/binding$")) == 1
    assert node_of(api, "slow") == "n0"


def test_leadership_lost_in_the_middle_of_a_batch_stops_its_bindings(api, kubeconfig):
    """While the first Binding of a batch is in flight the Lease is taken by another replica
    (here written by hand). The replica must see that at its next read of the Lease and bind
    nothing more; before, it went on for renew_deadline (50 s here)."""
    import datetime

    api.add_node(make_node("n0", cpu="8"))
    state: dict[str, Any] = {}

    def steal(ns, name, body):
        if name == "p0":
            lease = api.get("leases", "iro-system/iro-scheduler")
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            lease["spec"].update(holderIdentity="other", leaseDurationSeconds=60, renewTime=now, acquireTime=now)
            api.update("leases", lease)
            state["lost"] = api.wait_for(lambda: not s.is_leader(), 10)

    api.binding_hook = steal
    s = scheduler(kubeconfig, bind_workers=1, lease_duration=60, renew_deadline=50, retry_period=0.2)
    s.start()
    try:
        assert s.elector.wait_leader(10)
        api.add_pod(make_pod("p0", cpu="1", scheduler="iro"))
        api.add_pod(make_pod("p1", cpu="1", scheduler="iro"))
        assert api.wait_for(lambda: outcomes(s, "default/p1"), 15)
    finally:
        s.stop(release=False)
    assert state["lost"]
    assert outcomes(s, "default/p0") == ["bound"]  # its POST had started: the API server decides
    assert outcomes(s, "default/p1") == ["not-leader"]
    assert api.requests_to("POST", "/pods/p1/binding$") == []
    assert node_of(api, "p1") is None
    assert [e for e in api.list("events") if e["involvedObject"]["name"] == "p1"] == []
