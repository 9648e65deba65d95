"""The API layer: list + watch reflectors and writes through the real client, on the loopback server."""

from __future__ import annotations

from urllib.parse import parse_qs

from iro_fed.k8s.client import ClusterCache, Reflector
from iro_fed.k8s.testing import make_node, make_pod


def lists_of(api, path: str) -> list[dict]:
    return [r for r in api.requests if r["method"] == "GET" and r["path"] == path and "watch" not in parse_qs(r["query"])]


def test_reflector_follows_adds_updates_deletes_and_field_selector_transitions(api, kube):
    events = []
    api.add_pod(make_pod("a", scheduler="iro"))
    r = Reflector(kube.core.list_pod_for_all_namespaces, "pending", field_selector="spec.schedulerName=iro,spec.nodeName=",
                  on_event=lambda t, o: events.append((t, o["metadata"]["name"])), watch_timeout_s=5).start()
    try:
        assert r.synced.wait(10)
        assert set(r.store) == {"default/a"}
        api.add_pod(make_pod("b", scheduler="iro"))
        api.add_pod(make_pod("c"))  # another scheduler's: never seen
        assert api.wait_for(lambda: "default/b" in r.store, 10)
        kube.bind("default", "a", "n1")  # bound: leaves the selector -> DELETED
        assert api.wait_for(lambda: "default/a" not in r.store, 10)
        api.delete("pods", "default/b")
        assert api.wait_for(lambda: not r.store, 10)
    finally:
        r.stop()
    assert ("SYNC", "a") in events and ("ADDED", "b") in events and ("DELETED", "a") in events and ("DELETED", "b") in events
    assert all(name != "c" for _, name in events)


def test_reflector_relists_after_410_gone(api, kube):
    api.add_node(make_node("n1"))
    r = Reflector(kube.core.list_node, "nodes", watch_timeout_s=30).start()
    try:
        assert r.synced.wait(10)
        api.expire_watches()  # the watch ends; resuming from the old resourceVersion gets ERROR 410
        api.add_node(make_node("n2"))
        assert api.wait_for(lambda: len(lists_of(api, "/api/v1/nodes")) >= 2 and "n2" in r.store, 15)
        api.add_node(make_node("n3"))  # and watching resumes after the relist
        assert api.wait_for(lambda: "n3" in r.store, 15)
    finally:
        r.stop()
    assert set(r.store) == {"n1", "n2", "n3"}


def test_cluster_cache_model_tracks_the_cluster(api, kube):
    api.add_node(make_node("n1", cpu="4"))
    cache = ClusterCache(kube, watch_timeout_s=5, refresh_s=0.05).start()
    try:
        assert cache.wait_synced(10)
        assert cache.model().problem.allocated.sum() == 0
        api.add_pod(make_pod("x", cpu="1", memory="1Gi", node="n1"))
        assert api.wait_for(lambda: "default/x" in cache.pods.store, 10)
        assert cache.wait_fresh(10)
        assert cache.model().problem.allocated[0].tolist() == [1000.0, 1024.0]
        api.update("pods", dict(api.get("pods", "default/x"), status={"phase": "Succeeded"}))
        assert api.wait_for(lambda: cache.pods.store["default/x"]["status"]["phase"] == "Succeeded", 10)
        assert cache.wait_fresh(10)
        assert cache.model().problem.allocated.sum() == 0  # finished pods free their node
    finally:
        cache.stop()


def test_writes_report_status_and_message(api, kube):
    api.add_pod(make_pod("p"))
    ok = kube.bind("default", "p", "n1")
    assert ok.ok and ok.status == 201
    again = kube.bind("default", "p", "n2")
    assert not again.ok and again.status == 409 and "already assigned" in again.message
    missing = kube.bind("default", "nope", "n1")
    assert missing.status == 404
    patched = kube.patch_pod_status("default", "p", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert patched.ok
    conds = {c["type"]: c["status"] for c in api.get("pods", "default/p")["status"]["conditions"]}
    assert conds == {"PodScheduled": "True", "Ready": "False"}  # merged by type
