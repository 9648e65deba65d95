"""Extender robustness (h2), over the loopback HTTP server with real JSON:

* a NodeList node whose document the model cannot read (a bad quantity, no metadata.name) is
  refused alone, unresolvable, with a reason naming the field; the other nodes are answered. A body
  that is not an ExtenderArgs is still a 400.
* a pod bound through /bind and not yet counted by the node cache counts for host ports, topology
  spread and inter-pod anti-affinity as the bound pod will, not only for resources.
* a cached snapshot does not keep the pending pod's whole document.
"""

from __future__ import annotations

import copy
import gc
import weakref
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from iro_fed.k8s.client import ClusterCache  # noqa: E402
from iro_fed.k8s.extender import Extender, ExtenderServer  # noqa: E402
from iro_fed.k8s.testing import make_node, make_pod  # noqa: E402
from tests.k8s.helpers import post_json, serving, spread  # noqa: E402

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
PORTS_REASON = "node(s) didn't have free ports for the requested pod ports"




@pytest.fixture
def serve():
    yield from serving(lambda ext: ExtenderServer(ext, "127.0.0.1", 0, "/iro"))


def _names(result: dict[str, Any]) -> list[str]:
    if result["NodeNames"] is not None:
        return result["NodeNames"]
    return [n["metadata"]["name"] for n in result["Nodes"]["items"]]


def _pod(name: str, **kw: Any) -> dict[str, Any]:
    pod = make_pod(name, cpu="100m", memory="64Mi", **kw)
    pod["metadata"]["uid"] = f"uid-{name}"
    return pod


# --- 1. one malformed node in a NodeList --------------------------------------------------------


def _nodelist() -> dict[str, Any]:
    nodes = [make_node(n, cpu="4") for n in ("a", "b", "c")]
    for n in nodes:
        n["metadata"].update(uid=n["metadata"]["name"], resourceVersion="1")
    return {"items": nodes}


def _bad_quantity(nodes: dict[str, Any]) -> str:
    nodes["items"][1]["status"]["allocatable"]["cpu"] = "lots"
    return "b"


def _no_name(nodes: dict[str, Any]) -> str:
    del nodes["items"][1]["metadata"]["name"]
    return "Nodes.items[1]"


def _bad_taint(nodes: dict[str, Any]) -> str:
    nodes["items"][1]["spec"] = {"taints": [{"effect": "NoSchedule"}]}
    return "b"


def _past_model_limit(nodes: dict[str, Any]) -> str:
    nodes["items"][1]["status"]["allocatable"]["memory"] = "1Ei"  # a quantity kube takes; past the model's range
    return "b"


BAD_NODES = {
    "status.allocatable.cpu": _bad_quantity,
    "status.allocatable.memory": _past_model_limit,
    "metadata.name": _no_name,
    "spec.taints[0].key": _bad_taint,
}


@pytest.mark.parametrize("field", list(BAD_NODES))
def test_a_node_the_model_cannot_read_is_refused_alone(serve, field):
    nodes = _nodelist()
    key = BAD_NODES[field](nodes)
    srv = serve(Extender())
    status, res = post_json(srv.url, "/iro/filter", {"Pod": _pod("p"), "Nodes": nodes, "NodeNames": None})
    assert status == 200 and res["Error"] == "", res
    assert _names(res) == ["a", "c"]
    assert res["FailedNodes"] == {} and list(res["FailedAndUnresolvableNodes"]) == [key]
    assert field in res["FailedAndUnresolvableNodes"][key]
    status, scores = post_json(srv.url, "/iro/prioritize", {"Pod": _pod("p"), "Nodes": nodes, "NodeNames": None})
    assert status == 200
    by_host = {h["Host"]: h["Score"] for h in scores}
    assert set(by_host) == {"a", key, "c"} and by_host[key] == 0 and by_host["a"] > 0


def test_the_other_nodes_are_filtered_as_usual_beside_a_refused_one(serve):
    nodes = _nodelist()
    _bad_quantity(nodes)
    nodes["items"][2]["status"]["allocatable"]["cpu"] = "50m"
    srv = serve(Extender())
    status, res = post_json(srv.url, "/iro/filter", {"Pod": _pod("p"), "Nodes": nodes, "NodeNames": None})
    assert status == 200 and _names(res) == ["a"]
    assert res["FailedNodes"] == {"c": "Insufficient cpu"} and list(res["FailedAndUnresolvableNodes"]) == ["b"]


BAD_BODIES = {
    "Nodes.items[1]": lambda nodes: nodes["items"].__setitem__(1, "b"),
    "Nodes.items[1].status": lambda nodes: nodes["items"][1].__setitem__("status", []),
    "Nodes.items[1].metadata.name": lambda nodes: nodes["items"][1].__setitem__("metadata", "b"),
    "Nodes.items[1].metadata.name ": lambda nodes: nodes["items"][1]["metadata"].__setitem__("name", 7),
    "Nodes.items[1].status.allocatable": lambda nodes: nodes["items"][1]["status"].__setitem__("allocatable", ["cpu"]),
    "Nodes.items[1].spec.taints[0]": lambda nodes: nodes["items"][1].__setitem__("spec", {"taints": ["x"]}),
    "Nodes.items": lambda nodes: nodes.__setitem__("items", {"a": 1}),
    # a type Go's decoder refuses (metadata_error): not a node the model could not read
    "Nodes.items[1].metadata.labels.x": lambda nodes: nodes["items"][1]["metadata"].__setitem__("labels", {"x": 1}),
}


@pytest.mark.parametrize("field", list(BAD_BODIES))
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_a_body_that_is_not_an_extender_args_is_still_a_400(serve, field, verb):
    nodes = _nodelist()
    BAD_BODIES[field](nodes)
    srv = serve(Extender())
    status, res = post_json(srv.url, f"/iro/{verb}", {"Pod": _pod("p"), "Nodes": nodes, "NodeNames": None})
    assert status == 400, res
    assert field.strip() in res["Error"] and res["field"].startswith(field.strip())


@pytest.mark.parametrize("kind", ["podAntiAffinity", "podAffinity"])
@pytest.mark.parametrize(("term", "where", "message"), [
    ({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, "topologyKey": HOST},
     "labelSelector.matchExpressions[0].operator", "unknown operator 'Bogus'"),
    ({"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": ""}, "topologyKey", "required"),
])
def test_a_bad_required_pod_affinity_term_is_refused_without_the_pods_on_nodes_too(serve, kind, term, where, message):
    # Without a node cache the extender knows no pods on nodes, so nothing filters by this term;
    # its anti-affinity was not read and a bad one passed (200, every node scored) where the
    # extender with a cache refused it. It is the pod's error either way.
    pod = _pod("p", affinity={kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    field = f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution[0].{where}"
    srv = serve(Extender())
    args = {"Pod": pod, "Nodes": _nodelist(), "NodeNames": None}
    status, res = post_json(srv.url, "/iro/filter", args)
    assert status == 200 and field in res["Error"] and message in res["Error"], res  # the protocol's Error
    status, res = post_json(srv.url, "/iro/prioritize", args)
    assert status == 400 and field in res["Error"] and message in res["Error"], res


# --- 2. pods bound through /bind count for every rule ---------------------------------------------


@pytest.fixture
def cache(api, kube):
    """Two 2-cpu nodes in two zones, no pods; the model is rebuilt only when a test asks."""
    for name, zone in (("n1", "z1"), ("n2", "z2")):
        api.add_node(make_node(name, cpu="2", memory="4Gi", zone=zone))
    c = ClusterCache(kube, watch_timeout_s=5, refresh_s=3600).start()
    assert c.wait_synced(10)
    c.model()
    yield c
    c.stop()


def _bind(url: str, pod: dict[str, Any], node: str) -> None:
    status, res = post_json(url, "/iro/bind", {"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                                               "PodUID": pod["metadata"]["uid"], "Node": node})
    assert status == 200 and res == {"Error": ""}, res


def _filter(url: str, pod: dict[str, Any]) -> dict[str, Any]:
    status, res = post_json(url, "/iro/filter", {"Pod": pod, "NodeNames": ["n1", "n2"], "Nodes": None})
    assert status == 200 and res["Error"] == "", res
    return res


def _scores(url: str, pod: dict[str, Any]) -> dict[str, int]:
    status, res = post_json(url, "/iro/prioritize", {"Pod": pod, "NodeNames": ["n1", "n2"], "Nodes": None})
    assert status == 200, res
    return {h["Host"]: h["Score"] for h in res}


def _added(api, pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` created in the API server (its uid as the server gives it)."""
    return api.add_pod(copy.deepcopy(pod))


def test_two_pods_with_one_host_port_bound_back_to_back_do_not_share_a_node(api, cache, kube, serve):
    srv = serve(Extender(cache=cache, kube=kube))
    ports = [{"containerPort": 80, "hostPort": 8080}]
    p1, p2 = _added(api, _pod("p1", ports=ports)), _added(api, _pod("p2", ports=ports))
    assert _names(_filter(srv.url, p1)) == ["n1", "n2"]
    _bind(srv.url, p1, "n1")
    # kube-scheduler goes on at once: the node cache's model has not seen p1 bound
    res = _filter(srv.url, p2)
    assert res["NodeNames"] == ["n2"] and res["FailedNodes"] == {"n1": PORTS_REASON}
    assert res["FailedAndUnresolvableNodes"] == {}  # a preemption of p1 would free the port
    scores = _scores(srv.url, p2)
    assert scores["n1"] == 0 and scores["n2"] > 0
    # once the model counts p1 it is counted once (the model's own verdict), still refused
    assert api.wait_for(lambda: (cache.pods.store.get("default/p1") or {}).get("spec", {}).get("nodeName") == "n1")
    cache._build()
    res = _filter(srv.url, p2)
    assert res["NodeNames"] == ["n2"] and res["FailedNodes"] == {"n1": PORTS_REASON}


def test_an_assumed_pods_anti_affinity_keeps_a_matching_pod_off_its_node(api, cache, kube, serve):
    srv = serve(Extender(cache=cache, kube=kube))
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "db"}}, "topologyKey": HOST}]}}
    guard = _added(api, _pod("guard", affinity=anti))
    db = _added(api, _pod("db", labels={"role": "db"}))
    _filter(srv.url, guard)
    _bind(srv.url, guard, "n1")
    res = _filter(srv.url, db)
    assert res["NodeNames"] == ["n2"]
    assert res["FailedNodes"] == {"n1": "node(s) didn't satisfy existing pods anti-affinity rules"}


def test_an_assumed_pod_counts_in_its_topology_spread_domain(api, cache, kube, serve):
    srv = serve(Extender(cache=cache, kube=kube))
    s1, s2 = (_added(api, _pod(f"s{i}", labels={"app": "s"}, topology_spread=spread("s"))) for i in (1, 2))
    assert _names(_filter(srv.url, s1)) == ["n1", "n2"]
    _bind(srv.url, s1, "n1")
    res = _filter(srv.url, s2)
    assert res["NodeNames"] == ["n2"]
    assert res["FailedNodes"] == {"n1": "node(s) didn't match pod topology spread constraints"}


def test_an_assumed_pod_without_such_rules_changes_no_pod_filter(api, cache, kube, serve):
    srv = serve(Extender(cache=cache, kube=kube))
    plain = _added(api, _pod("plain"))
    other = _added(api, _pod("other", ports=[{"containerPort": 80, "hostPort": 8080}], labels={"role": "db"}))
    _filter(srv.url, plain)
    _bind(srv.url, plain, "n1")
    assert _names(_filter(srv.url, other)) == ["n1", "n2"]


# --- 3. a cached snapshot does not keep the pending pod's whole document -------------------------


class _Doc(dict):
    """A parsed pod that can be referenced weakly (a plain dict cannot)."""


def test_a_cached_snapshot_keeps_no_reference_to_the_request_pod():
    ext = Extender()
    nodes = _nodelist()
    pod = _Doc(_pod("big"))
    pod["spec"] = _Doc(pod["spec"], volumes=[{"name": f"v{i}", "emptyDir": {}} for i in range(200)])
    refs = [weakref.ref(pod), weakref.ref(pod["spec"])]
    assert _names(ext.filter({"Pod": pod, "Nodes": nodes, "NodeNames": None})) == ["a", "b", "c"]
    assert len(ext._snapshots[ext._model(nodes["items"])]) == 1  # cached, and still answers
    del pod
    gc.collect()
    assert [r() for r in refs] == [None, None]
    again = _pod("big2")
    assert _names(ext.filter({"Pod": again, "Nodes": nodes, "NodeNames": None})) == ["a", "b", "c"]
