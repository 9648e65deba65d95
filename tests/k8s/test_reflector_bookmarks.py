"""Watch bookmarks: a Reflector asks for them and, on a BOOKMARK, only moves the version it resumes
from, so that a watch of a quiet kind restarted after its timeout does not relist. Loopback API
server (with a compaction window) and the real kubernetes client."""

from __future__ import annotations

import threading
from urllib.parse import parse_qs

import pytest

from iro_fed.k8s.client import Reflector
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod


@pytest.fixture
def small_api(api: FakeApiServer) -> FakeApiServer:
    """The conftest server, keeping only the last 5 events for watches (etcd compaction, made small;
    its history is empty until the test adds something)."""
    api.history_limit = 5
    return api


def pod_requests(api: FakeApiServer, watch: bool) -> list[dict[str, str]]:
    """The queries of the GETs of /api/v1/pods: the watches or the lists."""
    out = []
    for r in api.requests_to("GET", r"^/api/v1/pods$"):
        q = {k: v[-1] for k, v in parse_qs(r["query"]).items()}
        if (q.get("watch") == "true") == watch:
            out.append(q)
    return out


def current_rv(api: FakeApiServer) -> str:
    return api._list_body("pods", [], {})["metadata"]["resourceVersion"]


def quiet_watch_times_out(api: FakeApiServer, r: Reflector) -> None:
    """Start ``r`` on pods, change only nodes until the pods' last version is compacted away,
    then end the pods watch the way its timeoutSeconds does."""
    r.start()
    assert r.synced.wait(10)
    assert api.wait_for(lambda: api.open_watches("pods") == 1, 10)  # watching from the list's version
    listed = r.resource_version
    for i in range(12):  # unrelated kind: the pods' version falls out of the 5-event window
        api.add_node(make_node(f"n{i}"))
    assert int(listed) < api._compacted_rv
    api.close_watches()
    assert api.wait_for(lambda: len(pod_requests(api, watch=True)) >= 2 and api.open_watches("pods") == 1, 15)


def test_a_watch_with_bookmarks_resumes_from_the_bookmark_without_a_relist(small_api, kube):
    api = small_api
    api.add_pod(make_pod("a"))
    events: list[tuple[str, str]] = []
    r = Reflector(kube.core.list_pod_for_all_namespaces, "pods", watch_timeout_s=60,
                  on_event=lambda t, o: events.append((t, o["metadata"]["name"])))
    try:
        quiet_watch_times_out(api, r)
        version_before = r.version
        first, second = pod_requests(api, watch=True)[:2]
        assert first["allowWatchBookmarks"] == "true"
        # the second watch starts from the bookmark's version (the server's current one), not the
        # version of the last pod event, which is compacted: no 410, no relist
        assert second["resourceVersion"] == current_rv(api) and r.resource_version == current_rv(api)
        assert len(pod_requests(api, watch=False)) == 1 and r.lists == 1
        api.add_pod(make_pod("b"))  # and it follows the changes after it
        assert api.wait_for(lambda: "default/b" in r.store, 10)
    finally:
        r.stop()
    # a BOOKMARK is no change: not an event, not a store entry, no version bump of its own
    assert events == [("SYNC", "a"), ("ADDED", "b")]
    assert set(r.store) == {"default/a", "default/b"}
    assert r.version == version_before + 1


def test_without_bookmarks_the_same_watch_relists(small_api, kube):
    api = small_api
    api.add_pod(make_pod("a"))
    r = Reflector(kube.core.list_pod_for_all_namespaces, "pods", watch_timeout_s=60, bookmarks=False)
    try:
        quiet_watch_times_out(api, r)
        version_synced = r.version
        watches = pod_requests(api, watch=True)
        assert "allowWatchBookmarks" not in watches[0]
        # it resumed from its last pod event's version: 410 Expired, a relist, then a new watch
        assert api.wait_for(lambda: len(pod_requests(api, watch=False)) == 2, 10)
        assert watches[1]["resourceVersion"] == watches[0]["resourceVersion"]
    finally:
        r.stop()
    assert r.lists == 2 and set(r.store) == {"default/a"}
    # the relist found pod a as it was: no change, so the version (what waiters follow) stays
    assert r.version == version_synced


def test_a_relist_moves_the_version_only_when_something_changed(api, kube):
    """The lists themselves, one after another (no watch): the first syncs, one that finds
    every object at its resourceVersion is no change, one with a new pod or a changed one is."""
    api.add_pod(make_pod("a"))
    r = Reflector(kube.core.list_pod_for_all_namespaces, "pods")
    r._list()
    synced = r.version
    assert r.synced.is_set() and synced == 1
    r._list()
    assert r.version == synced
    api.add_pod(make_pod("b"))
    r._list()
    assert r.version == synced + 1 and set(r.store) == {"default/a", "default/b"}
    api.delete("pods", "default/a")
    r._list()
    assert r.version == synced + 2 and set(r.store) == {"default/b"}


def test_periodic_bookmarks_move_the_version_of_an_open_watch(api, kube):
    api.bookmark_interval_s = 0.05
    api.add_node(make_node("n0"))
    events: list[str] = []
    r = Reflector(kube.core.list_node, "nodes", watch_timeout_s=60, on_event=lambda t, o: events.append(t)).start()
    try:
        assert r.synced.wait(10)
        assert api.wait_for(lambda: api.open_watches("nodes") == 1, 10)
        api.add_pod(make_pod("p"))  # another kind moves the version; the nodes watch sends nothing
        rv = current_rv(api)
        assert api.wait_for(lambda: r.resource_version == rv, 10)
        assert len([q for q in api.requests_to("GET", r"^/api/v1/nodes$") if "watch=true" in q["query"]]) == 1
    finally:
        r.stop()
    assert events == ["SYNC"] and set(r.store) == {"n0"}


def test_bookmarks_are_sent_only_to_watches_that_ask(api, kube):
    """The raw stream through the client's own watch.Watch: a BOOKMARK before the watch ends,
    with the current version, only with allow_watch_bookmarks."""
    from kubernetes import watch

    api.add_node(make_node("n0"))
    rv = api.list("nodes")[0]["metadata"]["resourceVersion"]
    api.add_pod(make_pod("p"))

    def stream(**kw: object) -> list[dict]:
        w = watch.Watch()
        out = []

        def closer() -> None:
            if api.wait_for(lambda: api.open_watches("nodes") == 1, 10):
                api.close_watches()

        t = threading.Thread(target=closer)
        t.start()
        for e in w.stream(kube.core.list_node, resource_version=rv, timeout_seconds=60, **kw):
            out.append(e)
        t.join()
        assert api.wait_for(lambda: api.open_watches("nodes") == 0, 10)
        return out

    with_bm = stream(allow_watch_bookmarks=True)
    assert [e["type"] for e in with_bm] == ["BOOKMARK"]
    assert with_bm[0]["raw_object"] == {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": current_rv(api)}}
    assert stream() == []


def test_a_bad_watch_resource_version_is_a_400(api, kube):
    from kubernetes.client.rest import ApiException

    with pytest.raises(ApiException) as err:
        kube.core.list_node(watch=True, resource_version="abc", timeout_seconds=1, _preload_content=False)
    assert err.value.status == 400 and "resourceVersion" in str(err.value.body)
