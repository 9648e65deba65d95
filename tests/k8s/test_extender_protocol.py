"""The extender's wire protocol against k8s.io/kube-scheduler/extender/v1 and pkg/scheduler/extender.go.

kube-scheduler marshals the v1 structs with encoding/json and no json tags: the keys are the Go
field names ("Pod", "Nodes", "NodeNames", "FailedNodes", "Host", "Score", "PodUID", ...), a nil
pointer or map is ``null``, and a NodeList is ``{"metadata": {}, "items": [...]}``. The requests
here are built exactly like that, and the replies are checked key by key against the structs.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from iro_fed.k8s.client import ClusterCache
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.testing import make_node, make_pod
from tests.k8s.helpers import serving

FILTER_RESULT_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


@pytest.fixture
def serve():
    yield from serving(lambda ext: ExtenderServer(ext, "127.0.0.1", 0, "/iro"))


def post(srv: ExtenderServer, verb: str, body: Any) -> tuple[int, Any]:
    host, port = srv.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("POST", f"/iro/{verb}", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, json.loads(raw)


def go_args(pod: dict, nodes: list[dict], node_cache_capable: bool) -> dict:
    """ExtenderArgs as kube-scheduler's HTTPExtender marshals it."""
    if node_cache_capable:
        return {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}


def cluster() -> list[dict]:
    return [make_node("fits", cpu="8"), make_node("small", cpu="1"),
            make_node("tainted", cpu="8", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])]


# --- filter and prioritize: the exact shapes kube-scheduler decodes ----------------------------


def test_filter_reply_in_nodelist_mode_is_an_extender_filter_result_with_a_nodelist(serve):
    srv = serve(Extender("best-fit"))
    status, res = post(srv, "filter", go_args(make_pod("p", cpu="2"), cluster(), node_cache_capable=False))
    assert status == 200
    assert set(res) == FILTER_RESULT_KEYS
    assert res["NodeNames"] is None and res["Error"] == ""
    assert set(res["Nodes"]) == {"metadata", "items"} and res["Nodes"]["items"] == [cluster()[0]]
    assert res["FailedNodes"] == {"small": "Insufficient cpu"}
    assert res["FailedAndUnresolvableNodes"] == {"tainted": "node(s) had untolerated taint {dedicated: db}"}


def test_prioritize_reply_is_a_host_priority_list_of_integers_0_to_10(serve):
    srv = serve(Extender("best-fit", solver_weight=1.0))
    nodes = [make_node("big", cpu="16"), make_node("snug", cpu="2"), make_node("small", cpu="1")]
    status, res = post(srv, "prioritize", go_args(make_pod("p", cpu="1500m"), nodes, node_cache_capable=False))
    assert status == 200
    assert isinstance(res, list) and all(set(h) == {"Host", "Score"} for h in res)
    assert [h["Host"] for h in res] == ["big", "snug", "small"]
    # int64 in Go: a JSON 7.0 or "7" would not decode; an infeasible node scores 0
    assert [(type(h["Score"]), h["Score"]) for h in res] == [(int, 0), (int, 10), (int, 0)]


@pytest.fixture
def cached(api, kube):
    for n in cluster():
        api.add_node(n)
    cache = ClusterCache(kube, watch_timeout_s=5).start()
    assert cache.wait_synced(10)
    yield cache
    cache.stop()


def test_node_cache_capable_filter_answers_names_only_and_only_those_asked(serve, cached):
    srv = serve(Extender("best-fit", cache=cached))
    args = go_args(make_pod("p", cpu="2"), cluster(), node_cache_capable=True)
    args["NodeNames"] = ["tainted", "fits", "small", "unknown"]
    status, res = post(srv, "filter", args)
    assert status == 200 and set(res) == FILTER_RESULT_KEYS and res["Error"] == ""
    assert res["Nodes"] is None and res["NodeNames"] == ["fits"]
    assert set(res["FailedNodes"]) == {"small", "unknown"}  # preemption or a fresher cache may help
    assert set(res["FailedAndUnresolvableNodes"]) == {"tainted"}


# --- bind --------------------------------------------------------------------------------------


def test_bind_args_as_kube_sends_them_bind_once(serve, api, kube, cached):
    srv = serve(Extender(cache=cached, kube=kube))
    pod = api.add_pod(make_pod("web"))
    status, res = post(srv, "bind", {"PodName": "web", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "fits"})
    assert (status, res) == (200, {"Error": ""})
    assert api.get("pods", "default/web")["spec"]["nodeName"] == "fits"
    binding = api.requests_to("POST", r"/pods/web/binding$")
    assert len(binding) == 1


def test_bind_with_a_wrong_pod_uid_is_an_error_and_the_pod_stays_unbound(serve, api, kube, cached):
    """The pod was deleted and recreated under the same name after kube-scheduler picked a node
    for the old one: the UID precondition in the Binding makes the API server refuse it."""
    srv = serve(Extender(cache=cached, kube=kube))
    api.add_pod(make_pod("web"))
    status, res = post(srv, "bind", {"PodName": "web", "PodNamespace": "default", "PodUID": "uid-of-the-old-pod", "Node": "fits"})
    assert status == 200 and "409" in res["Error"] and "uid-of-the-old-pod" in res["Error"]
    assert api.get("pods", "default/web")["spec"].get("nodeName") is None


def test_bind_to_a_node_the_cluster_does_not_have_is_an_error_and_no_binding_is_posted(serve, api, kube, cached):
    """The API server creates a Binding to any node name (it does not check the node exists): the
    pod would be stuck on a phantom node. Before the fix the extender bound it to 'ghost'."""
    srv = serve(Extender(cache=cached, kube=kube))
    pod = api.add_pod(make_pod("web"))
    status, res = post(srv, "bind", {"PodName": "web", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "ghost"})
    assert status == 200
    assert "'ghost'" in res["Error"] and "no Binding created" in res["Error"]
    assert api.get("pods", "default/web")["spec"].get("nodeName") is None
    assert api.requests_to("POST", r"/pods/web/binding$") == []


# --- preempt -------------------------------------------------------------------------------------


@pytest.fixture
def gpu_cluster(api, kube):
    api.add_node(make_node("g1", cpu="16", gpus=1))
    api.add_node(make_node("g2", cpu="16", gpus=2))
    api.add_node(make_node("c1", cpu="4"))
    pods = {
        "trainer": api.add_pod(make_pod("trainer", cpu="2", gpus=1, node="g1")),
        "big-trainer": api.add_pod(make_pod("big-trainer", cpu="1", gpus=2, node="g2")),
        "web": api.add_pod(make_pod("web", cpu="3", node="c1")),
    }
    cache = ClusterCache(kube, watch_timeout_s=5).start()
    assert cache.wait_synced(10) and cache.wait_fresh(10)
    yield cache, {k: v["metadata"]["uid"] for k, v in pods.items()}
    cache.stop()


def meta_victims(*uids: str, pdb: int = 0) -> dict:
    return {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": pdb}


def test_preempting_gpu_pods_frees_their_cards(serve, gpu_cluster):
    """A GPU pod preempting GPU pods: before the fix only cpu and memory of the victims were given
    back, never their cards, so every GPU node was dropped and such a pod could never preempt."""
    cache, uid = gpu_cluster
    srv = serve(Extender(cache=cache))
    args = {"Pod": make_pod("urgent", cpu="1", gpus=2), "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {"g1": meta_victims(uid["trainer"]),  # one card: never enough for 2
                                      "g2": meta_victims(uid["big-trainer"], pdb=1)}}
    status, res = post(srv, "preempt", args)
    assert status == 200
    assert res == {"NodeNameToMetaVictims": {"g2": meta_victims(uid["big-trainer"], pdb=1)}}
    # one card is enough for a 1-GPU pod on either node
    args["Pod"] = make_pod("urgent", cpu="1", gpus=1)
    _, res = post(srv, "preempt", args)
    assert set(res["NodeNameToMetaVictims"]) == {"g1", "g2"}


def test_a_victim_frees_only_what_it_holds_on_that_node(serve, gpu_cluster):
    """kube resolves each victim UID among the pods of that node; a UID of a pod running elsewhere
    frees nothing there (before the fix it freed its requests on whichever node it was listed)."""
    cache, uid = gpu_cluster
    srv = serve(Extender(cache=cache))
    args = {"Pod": make_pod("urgent", cpu="3"),
            "NodeNameToMetaVictims": {"c1": meta_victims(uid["trainer"]),  # trainer (2 cpu) runs on g1
                                      "g1": meta_victims(uid["trainer"])}}
    status, res = post(srv, "preempt", args)
    assert status == 200
    assert res == {"NodeNameToMetaVictims": {"g1": meta_victims(uid["trainer"])}}
    # with the pod that really runs there, c1 has room
    args["NodeNameToMetaVictims"]["c1"] = meta_victims(uid["web"])
    _, res = post(srv, "preempt", args)
    assert set(res["NodeNameToMetaVictims"]) == {"c1", "g1"}


def test_preempt_with_whole_victim_pods_answers_meta_victims(serve, api, gpu_cluster):
    """nodeCacheCapable: false sends NodeNameToVictims with v1.Pod objects; the result is always
    NodeNameToMetaVictims (kube converts the UIDs back with its own node info)."""
    cache, uid = gpu_cluster
    srv = serve(Extender(cache=cache))
    web = api.get("pods", "default/web")
    args = {"Pod": make_pod("urgent", cpu="3"), "NodeNameToMetaVictims": None,
            "NodeNameToVictims": {"c1": {"Pods": [web], "NumPDBViolations": 2}}}
    status, res = post(srv, "preempt", args)
    assert (status, res) == (200, {"NodeNameToMetaVictims": {"c1": meta_victims(uid["web"], pdb=2)}})
    # stateless (no cache): kube's proposal comes back unchanged, as MetaVictims
    stateless = serve(Extender())
    assert post(stateless, "preempt", args) == (200, {"NodeNameToMetaVictims": {"c1": meta_victims(uid["web"], pdb=2)}})


def test_a_finished_pod_listed_as_victim_frees_nothing_more(serve, api, kube):
    """A Succeeded pod still bound to the node is not counted in its usage; listing it as a victim
    must not give its requests back a second time (before the fix it did)."""
    api.add_node(make_node("n1", cpu="8"))
    api.add_pod(make_pod("running", cpu="6", node="n1"))
    done = make_pod("done", cpu="6", node="n1")
    done["status"] = {"phase": "Succeeded"}
    done = api.add_pod(done)
    cache = ClusterCache(kube, watch_timeout_s=5).start()
    try:
        assert cache.wait_synced(10) and cache.wait_fresh(10)
        srv = serve(Extender(cache=cache))
        _, res = post(srv, "preempt", {"Pod": make_pod("urgent", cpu="4"),
                                       "NodeNameToMetaVictims": {"n1": meta_victims(done["metadata"]["uid"])}})
        assert res == {"NodeNameToMetaVictims": {}}  # 2 cpu free either way
    finally:
        cache.stop()
