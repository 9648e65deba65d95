"""``iro scheduler`` honours what kube-scheduler's NodePorts, PodTopologySpread (DoNotSchedule) and
InterPodAffinity (required terms) filter on: the pods already on a node, and, within one batch,
the pods placed before a pod in queue order (kube places one pod at a time). Each failure is
reported in kube's words. Loopback API server, real kubernetes client, a scheduler run by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from iro_fed.k8s.snapshot import PodSpecError, build_snapshot, pod_rules, ports_conflict
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from tests.k8s.helpers import HOST, ZONE, Clock, cycle, make_scheduler, settle, spread


def anti(app: str, key: str = HOST) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}


def affinity(app: str, key: str = ZONE) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]}, "topologyKey": key}]}}


def node_of(api: FakeApiServer, name: str) -> str | None:
    pod = api.get("pods", f"default/{name}")
    return pod["spec"].get("nodeName") if pod else None


def failed_message(api: FakeApiServer, name: str) -> str:
    [event] = [e for e in api.list("events") if e["involvedObject"]["name"] == name and e["reason"] == "FailedScheduling"]
    cond = next(c for c in api.get("pods", f"default/{name}")["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["message"] == event["message"]
    return event["message"]


@pytest.fixture
def clock() -> Clock:
    return Clock()


# --- InterPodAffinity: anti-affinity, both directions, and within one batch ----------------------


def test_two_anti_affine_replicas_of_one_batch_land_on_different_nodes(api, kubeconfig, clock):
    """The solver sees each replica against the bound pods only (none): kube places one at a time,
    so the second must not join the first. The one placed there is not bound but tried again at
    once (no backoff, not unschedulable); a third, with no node left, gets kube's message."""
    for n in ("n0", "n1"):
        api.add_node(make_node(n, cpu="8"))
    for i in range(3):
        api.add_pod(make_pod(f"db-{i}", cpu="1", scheduler="iro", labels={"app": "db"}, affinity=anti("db")))
    s = make_scheduler(kubeconfig, clock)
    try:
        first = cycle(s)
        assert first is not None and {o.status for o in first.pods} <= {"bound", "deferred"}
        assert s.queue_status() == {}  # a deferred pod is not in the unschedulable queue: tried again at once
        settle(s)
    finally:
        s.stop()
    nodes = [node_of(api, f"db-{i}") for i in range(3)]
    assert sorted(n for n in nodes if n) == ["n0", "n1"]
    [left] = [f"db-{i}" for i, n in enumerate(nodes) if n is None]
    assert failed_message(api, left) == "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."


def test_the_batch_check_keeps_the_first_of_two_anti_affine_replicas_placed_together():
    """The check after the joint solve, in queue order: the second replica on the first one's node
    fails against it (the snapshot did not know the first), a third on another node passes."""
    from iro_fed.k8s.scheduler import _batch_conflicts
    from iro_fed.k8s.snapshot import ClusterModel

    nodes = [make_node("n0"), make_node("n1")]
    pods = [make_pod(f"db-{i}", labels={"app": "db"}, affinity=anti("db")) for i in range(3)]
    model = ClusterModel(nodes, [], pending=pods)
    snap = model.with_pods(pods)
    assert all(not k.startswith("iro-fed.io/pod-") for w in snap.problem.workloads for k in w.node_selector)
    conflicts, kept = _batch_conflicts(model, snap.problem, pods, np.array([0, 0, 1]))
    assert conflicts == {1: "node(s) didn't match pod anti-affinity rules"}
    assert sorted((node, rules.labels["app"]) for node, rules in kept.pods()) == [("n0", "db"), ("n1", "db")]
    # No pod of the batch reads the pods on the nodes: nothing is checked.
    plain = [make_pod(f"web-{i}") for i in range(2)]
    assert _batch_conflicts(model, model.with_pods(plain).problem, plain, np.array([0, 0]))[0] == {}


def test_a_pod_with_affinity_to_a_pod_of_its_batch_follows_it(api, kubeconfig, clock):
    """web's affinity target (cache, earlier in the queue) is in the same batch: the snapshot sees no
    cache pod, so web is refused everywhere; as cache is bound in that batch, web is placed after
    it, as kube would, rather than left unschedulable: it joins cache's zone in the same batch."""
    api.add_node(make_node("a0", cpu="2", zone="a"))
    api.add_node(make_node("a1", cpu="2", zone="a"))
    api.add_node(make_node("b0", cpu="16", zone="b"))
    api.add_pod(make_pod("cache", cpu="1", scheduler="iro", labels={"app": "cache"}, node_selector={ZONE: "a"}, priority=5))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro", labels={"app": "web"}, affinity=affinity("cache")))
    s = make_scheduler(kubeconfig, clock)
    try:
        first = cycle(s)
        assert {o.key: o.status for o in first.pods} == {"default/cache": "bound", "default/web": "bound"}
        assert settle(s) == []
    finally:
        s.stop()
    assert node_of(api, "cache") in ("a0", "a1")
    assert node_of(api, "web") in ("a0", "a1")
    assert not [e for e in api.list("events") if e["reason"] == "FailedScheduling"]


def test_an_existing_pods_anti_affinity_excludes_the_incoming_pod(api, kubeconfig, clock):
    # db-0 on n0 repels app=web on its node; n1 is full: web fits nowhere.
    api.add_node(make_node("n0", cpu="8"))
    api.add_node(make_node("n1", cpu="1"))
    api.add_pod(make_pod("db-0", cpu="1", node="n0", labels={"app": "db"}, affinity=anti("web")))
    api.add_pod(make_pod("web", cpu="2", scheduler="iro", labels={"app": "web"}))
    api.add_pod(make_pod("other", cpu="1", scheduler="iro", labels={"app": "other"}))
    s = make_scheduler(kubeconfig, clock)
    try:
        settle(s)
    finally:
        s.stop()
    assert node_of(api, "web") is None
    assert node_of(api, "other") is not None  # not selected by db-0's term
    assert failed_message(api, "web") == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't satisfy existing pods anti-affinity rules.")


def test_a_batch_pod_with_anti_affinity_repels_a_later_pod_of_the_batch(api, kubeconfig, clock):
    """The other direction within one batch: guard (first in queue order, higher priority) repels
    app=web from its node; web has no constraint of its own and must not be bound next to it."""
    api.add_node(make_node("n0", cpu="8"))
    api.add_node(make_node("n1", cpu="8"))
    api.add_pod(make_pod("guard", cpu="1", scheduler="iro", labels={"app": "guard"}, affinity=anti("web"), priority=10))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro", labels={"app": "web"}))
    s = make_scheduler(kubeconfig, clock)
    try:
        settle(s)
    finally:
        s.stop()
    assert {node_of(api, "guard"), node_of(api, "web")} == {"n0", "n1"}


def anti_nodes(pod: dict[str, Any], nodes: list[dict[str, Any]], bound: list[dict[str, Any]]) -> list[str]:
    """The nodes that pass InterPodAffinity for the pod (the snapshot's synthetic labels)."""
    snap = build_snapshot(nodes, bound, [pod])
    keys = [k for k in snap.problem.workloads[0].node_selector if "affinity-" in k]
    return [n.name for n in snap.problem.nodes if all(n.labels.get(k) == "true" for k in keys)]


@pytest.mark.parametrize(("term_extra", "selects_other", "selects_default"), [
    ({}, False, False),  # a term without namespaces is about its own pod's namespace
    ({"namespaces": ["other"]}, True, False),
    ({"namespaces": ["default"]}, False, True),
    ({"namespaceSelector": {}}, True, True),  # every namespace
    ({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "other"}}}, True, False),
    ({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "third"}}}, False, False),
])
def test_anti_affinity_terms_select_pods_by_namespace(term_extra, selects_other, selects_default):
    nodes = [make_node("n0"), make_node("n1")]
    # The pending pod's term (pod in "default") against db-0 in "other".
    bound = [make_pod("db-0", node="n0", namespace="other", labels={"app": "db"})]
    pod = make_pod("db-1", labels={"app": "db"}, affinity=anti("db"))
    pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0].update(term_extra)
    assert anti_nodes(pod, nodes, bound) == (["n1"] if selects_other else ["n0", "n1"])
    # The other direction: db-0's term (db-0 in "other") against a pending pod in "default".
    bound = [make_pod("db-0", node="n0", namespace="other", labels={"app": "db"}, affinity=anti("db"))]
    bound[0]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0].update(term_extra)
    assert anti_nodes(make_pod("web", labels={"app": "db"}), nodes, bound) == (["n1"] if selects_default else ["n0", "n1"])


def test_anti_affinity_over_zones_and_pods_being_deleted():
    """A zone term excludes every node of the zone; a pod being deleted still counts (kube's
    InterPodAffinity sees it until it is gone, unlike PodTopologySpread)."""
    nodes = [make_node("a0", zone="a"), make_node("a1", zone="a"), make_node("b0", zone="b"), make_node("x")]
    dying = make_pod("db-0", node="a0", labels={"app": "db"})
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pod = make_pod("db-1", labels={"app": "db"}, affinity=anti("db", ZONE))
    assert anti_nodes(pod, nodes, [dying]) == ["b0", "x"]  # x has no zone label: anti-affinity does not apply


# --- InterPodAffinity: affinity --------------------------------------------------------------------


def test_affinity_to_an_existing_pods_zone(api, kubeconfig, clock):
    api.add_node(make_node("a0", cpu="4", zone="a"))
    api.add_node(make_node("b0", cpu="8", zone="b"))
    api.add_node(make_node("b1", cpu="8", zone="b"))
    api.add_node(make_node("c0", cpu="8", zone="c"))
    api.add_pod(make_pod("cache", cpu="500m", node="a0", labels={"app": "cache"}))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro", labels={"app": "web"}, affinity=affinity("cache")))
    api.add_pod(make_pod("lost", cpu="1", scheduler="iro", labels={"app": "lost"}, affinity=affinity("nothing")))
    s = make_scheduler(kubeconfig, clock)
    try:
        settle(s)
    finally:
        s.stop()
    assert node_of(api, "web") == "a0"
    assert node_of(api, "lost") is None
    assert failed_message(api, "lost") == "0/4 nodes are available: 4 node(s) didn't match pod affinity rules."


def test_the_first_pod_of_a_self_affine_series_may_go_anywhere(api, kubeconfig, clock):
    """kube's special case: no pod anywhere matches the term and the pod matches its own term, so it
    is allowed on any node with the topology label; a pod that does not match its own term is not.
    Its later replicas then follow it into its zone."""
    api.add_node(make_node("a0", cpu="8", zone="a"))
    api.add_node(make_node("b0", cpu="8", zone="b"))
    api.add_node(make_node("nozone", cpu="8"))
    api.add_pod(make_pod("stranger", cpu="1", scheduler="iro", labels={"app": "other"}, affinity=affinity("x")))
    s = make_scheduler(kubeconfig, clock)
    try:
        settle(s)
        assert node_of(api, "stranger") is None
        assert failed_message(api, "stranger") == "0/3 nodes are available: 3 node(s) didn't match pod affinity rules."
        for i in range(3):
            api.add_pod(make_pod(f"x-{i}", cpu="1", scheduler="iro", labels={"app": "x"}, affinity=affinity("x")))
        settle(s)
        zones = {node_of(api, f"x-{i}") for i in range(3)}
        assert len(zones) == 1 and zones <= {"a0", "b0"}  # one zone; never the node without the label
    finally:
        s.stop()


# --- PodTopologySpread -----------------------------------------------------------------------------


def test_three_replicas_spread_over_three_zones_with_max_skew_1(api, kubeconfig, clock):
    # Zone a has the most room: packing alone would put every replica there.
    api.add_node(make_node("a0", cpu="16", zone="a"))
    api.add_node(make_node("b0", cpu="4", zone="b"))
    api.add_node(make_node("c0", cpu="4", zone="c"))
    for i in range(3):
        api.add_pod(make_pod(f"web-{i}", cpu="1", scheduler="iro", labels={"app": "web"}, topology_spread=spread("web")))
    s = make_scheduler(kubeconfig, clock)
    try:
        settle(s)
    finally:
        s.stop()
    assert sorted(node_of(api, f"web-{i}") for i in range(3)) == ["a0", "b0", "c0"]


def test_spread_failure_messages(api, kubeconfig, clock):
    """Zone a holds 2 matching pods, zone b's node is full, one node has no zone label: kube's
    NodeResourcesFit runs before PodTopologySpread, so the full node is "Insufficient cpu"."""
    api.add_node(make_node("a0", cpu="8", zone="a"))
    api.add_node(make_node("b0", cpu="1", zone="b"))
    api.add_node(make_node("nozone", cpu="8"))
    for i in range(2):
        api.add_pod(make_pod(f"old-{i}", cpu="1", node="a0", labels={"app": "web"}))
    api.add_pod(make_pod("web", cpu="2", scheduler="iro", labels={"app": "web"}, topology_spread=spread("web")))
    s = make_scheduler(kubeconfig, clock)
    try:
        settle(s)
    finally:
        s.stop()
    assert node_of(api, "web") is None
    assert failed_message(api, "web") == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match pod topology spread constraints, "
        "1 node(s) didn't match pod topology spread constraints (missing required label).")


def test_spread_counts_only_matching_pods_of_the_namespace_on_eligible_nodes():
    """The counts behind the skew: pods of another namespace, pods being deleted and nodes the
    pod's node selector excludes (nodeAffinityPolicy Honor) do not count."""
    nodes = [make_node("a0", zone="a", labels={"tier": "x"}), make_node("b0", zone="b", labels={"tier": "x"}),
             make_node("c0", zone="c", labels={"tier": "y"})]
    dying = make_pod("dying", node="b0", labels={"app": "web"})
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    bound = [make_pod("a", node="a0", labels={"app": "web"}), dying,
             make_pod("elsewhere", node="b0", labels={"app": "web"}, namespace="other")]
    pod = make_pod("web", labels={"app": "web"}, topology_spread=spread("web"), node_selector={"tier": "x"})
    snap = build_snapshot(nodes, bound, [pod])
    p = snap.problem
    # Counts a=1, b=0 over the eligible zones (c is not): a fails the skew, b passes, c fails the selector.
    spread_keys = [k for k in p.workloads[0].node_selector if k.startswith("iro-fed.io/spread-skew-")]
    assert len(spread_keys) == 1
    assert [n.name for n in p.nodes if n.labels.get(spread_keys[0]) == "true"] == ["b0", "c0"]


def spread_nodes(pod: dict[str, Any], nodes: list[dict[str, Any]], bound: list[dict[str, Any]]) -> list[str]:
    """The nodes that pass the pod's spread constraints (the snapshot's synthetic labels)."""
    snap = build_snapshot(nodes, bound, [pod])
    keys = [k for k in snap.problem.workloads[0].node_selector if k.startswith("iro-fed.io/spread-")]
    return [n.name for n in snap.problem.nodes if all(n.labels.get(k) == "true" for k in keys)]


def test_min_domains_and_node_taints_policy():
    nodes = [make_node("a0", zone="a"), make_node("b0", zone="b"),
             make_node("c0", zone="c", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])]
    bound = [make_pod("a", node="a0", labels={"app": "web"}), make_pod("b", node="b0", labels={"app": "web"})]
    pod = make_pod("web", labels={"app": "web"}, topology_spread=spread("web"))
    # Counts a=1, b=1, c=0: only c passes (nodeTaintsPolicy Ignore: the tainted node's zone counts).
    assert spread_nodes(pod, nodes, bound) == ["c0"]
    # nodeTaintsPolicy Honor: c is not counted, the minimum is 1: a and b pass (and c, whose count is 0).
    pod["spec"]["topologySpreadConstraints"][0]["nodeTaintsPolicy"] = "Honor"
    assert spread_nodes(pod, nodes, bound) == ["a0", "b0", "c0"]
    # minDomains 3 with 2 eligible domains: the minimum is 0, so a and b fail again.
    pod["spec"]["topologySpreadConstraints"][0]["minDomains"] = 3
    assert spread_nodes(pod, nodes, bound) == ["c0"]
    # ScheduleAnyway only scores.
    pod["spec"]["topologySpreadConstraints"] = [dict(spread("web")[0], whenUnsatisfiable="ScheduleAnyway")]
    assert spread_nodes(pod, nodes, bound) == ["a0", "b0", "c0"]


# --- NodePorts --------------------------------------------------------------------------------------


def test_host_port_conflicts(api, kubeconfig, clock):
    api.add_node(make_node("n0", cpu="16"))
    api.add_node(make_node("n1", cpu="4"))
    api.add_pod(make_pod("holder", cpu="1", node="n0", ports=[{"containerPort": 80, "hostPort": 8080}]))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro", ports=[{"containerPort": 80, "hostPort": 8080}]))
    api.add_pod(make_pod("udp", cpu="1", scheduler="iro", ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}]))
    api.add_pod(make_pod("p-0", cpu="1", scheduler="iro", ports=[{"containerPort": 9000, "hostPort": 9000}]))
    api.add_pod(make_pod("p-1", cpu="1", scheduler="iro", ports=[{"containerPort": 9000, "hostPort": 9000}]))
    api.add_pod(make_pod("p-2", cpu="1", scheduler="iro", ports=[{"containerPort": 9000, "hostPort": 9000}]))
    s = make_scheduler(kubeconfig, clock)
    try:
        settle(s)
    finally:
        s.stop()
    assert node_of(api, "web") == "n1"
    assert node_of(api, "udp") is not None  # another protocol: no conflict
    placed = [node_of(api, f"p-{i}") for i in range(3)]
    assert sorted(n for n in placed if n) == ["n0", "n1"]
    [left] = [f"p-{i}" for i, n in enumerate(placed) if n is None]
    assert failed_message(api, left) == "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."


@pytest.mark.parametrize(("want", "used", "conflict"), [
    (("0.0.0.0", "TCP", 80), [("10.0.0.1", "TCP", 80)], True),  # 0.0.0.0 conflicts with every address
    (("10.0.0.1", "TCP", 80), [("0.0.0.0", "TCP", 80)], True),
    (("10.0.0.1", "TCP", 80), [("10.0.0.2", "TCP", 80)], False),
    (("10.0.0.1", "TCP", 80), [("10.0.0.1", "TCP", 80)], True),
    (("0.0.0.0", "UDP", 80), [("0.0.0.0", "TCP", 80)], False),
    (("0.0.0.0", "TCP", 81), [("0.0.0.0", "TCP", 80)], False),
])
def test_ports_conflict_as_kubes_host_port_info(want, used, conflict):
    assert ports_conflict(want, used) is conflict


def test_host_ports_read_as_kube_reads_them():
    pod = make_pod("p", ports=[{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}])
    pod["spec"]["initContainers"] = [
        {"name": "side", "restartPolicy": "Always", "ports": [{"containerPort": 53, "hostPort": 53, "protocol": "UDP"}]},
        {"name": "init", "ports": [{"containerPort": 54, "hostPort": 54}]},  # runs before the app: holds no port
    ]
    pod["spec"]["containers"][0]["ports"][0]["hostIP"] = ""
    assert pod_rules(pod).ports == (("0.0.0.0", "UDP", 53), ("0.0.0.0", "TCP", 8080))


# --- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mutate", "path"), [
    (lambda s: s.update(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}}]}}),
     "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"),
    (lambda s: s.update(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Like"}]}, "topologyKey": HOST}]}}),
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].operator"),
    (lambda s: s.update(topologySpreadConstraints=[{"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]),
     "spec.topologySpreadConstraints[0].maxSkew"),
    (lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": "80"}]), "spec.containers[0].ports[0].hostPort"),
])
def test_a_malformed_rule_names_its_field(mutate, path, api, kubeconfig, clock):
    pod = make_pod("bad", scheduler="iro")
    mutate(pod["spec"])
    with pytest.raises(PodSpecError) as err:
        pod_rules(pod)
    assert err.value.field == path
    api.add_node(make_node("n0"))
    api.add_pod(pod)
    api.add_pod(make_pod("good", scheduler="iro"))
    s = make_scheduler(kubeconfig, clock)
    try:
        batch = cycle(s)
    finally:
        s.stop()
    status = {o.key: (o.status, o.message) for o in batch.pods}
    assert status["default/good"][0] == "bound"  # one bad pod does not block the others
    assert status["default/bad"][0] == "invalid" and path in status["default/bad"][1]


def test_pods_without_such_rules_pay_nothing_more(monkeypatch):
    """No pod reads the pods on the nodes and no bound pod has anti-affinity: the plugins are not
    evaluated at all (the bound pods are not even parsed for them)."""
    import iro_fed.k8s.snapshot as snapshot

    def boom(*a, **k):
        raise AssertionError("evaluated")

    monkeypatch.setattr(snapshot, "pod_rules", boom)
    monkeypatch.setattr(snapshot, "placed_pods", boom)
    nodes = [make_node("n0"), make_node("n1")]
    bound = [make_pod("b", node="n0", labels={"app": "db"}, ports=[{"containerPort": 80}])]
    snap = build_snapshot(nodes, bound, [make_pod("web", labels={"app": "web"})])
    assert snap.problem.workloads[0].node_selector == {}


# --- what retries a pod rejected for the pods on the nodes ------------------------------------------


def test_a_bound_pod_added_or_deleted_retries_the_pods_it_may_fit(api, kubeconfig, clock):
    """kube's InterPodAffinity and PodTopologySpread register pod adds, and with NodePorts pod
    deletes: ``web`` (affinity to app=cache, none yet) is retried when a cache pod is bound by
    someone else, ``port`` (its host port held) when the holder is deleted; ``big`` (rejected for
    cpu only) is not retried by the add."""
    api.add_node(make_node("a0", cpu="4", zone="a"))
    api.add_node(make_node("b0", cpu="4", zone="b"))
    for n in ("a0", "b0"):
        api.add_pod(make_pod(f"holder-{n}", cpu="1", node=n, ports=[{"containerPort": 80, "hostPort": 80}]))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro", labels={"app": "web"}, affinity=affinity("cache")))
    api.add_pod(make_pod("port", cpu="1", scheduler="iro", ports=[{"containerPort": 80, "hostPort": 80}]))
    api.add_pod(make_pod("big", cpu="8", scheduler="iro"))
    s = make_scheduler(kubeconfig, clock)
    try:
        cycle(s)
        assert set(s.queue_status()) == {"default/web", "default/port", "default/big"}
        clock.advance(s.pod_max_backoff_s)
        assert cycle(s) is None  # nothing changed: all wait
        api.add_pod(make_pod("cache", cpu="500m", node="b0", labels={"app": "cache"}))
        batch = cycle(s)
        assert {o.key: o.status for o in batch.pods} == {"default/web": "bound"}
        assert node_of(api, "web") == "b0"
        api.delete("pods", "default/holder-a0")
        clock.advance(s.pod_max_backoff_s)
        batch = cycle(s)
        # (the delete frees cpu too: big, rejected for it, is tried again as well, and still fails)
        assert {o.key: o.status for o in batch.pods} == {"default/port": "bound", "default/big": "unschedulable"}
        assert node_of(api, "port") == "a0"
    finally:
        s.stop()
