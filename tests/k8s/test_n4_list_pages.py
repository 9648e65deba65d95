"""Lists come in pages (``limit`` / ``continue``), as client-go's pager reads them.

Before, every list (each reflector's relist, ``Kube.list_nodes`` / ``list_pods``) asked for the
whole collection in one answer, so a relist held ~48 MB per 1,000 pods parsed at once before
the caches trimmed each object. Now each list reads ``Kube.list_page_size`` (500) objects a page,
trims each page as it comes, takes the last page's ``metadata.resourceVersion`` for the watch,
and starts again from the first page when a ``continue`` token expired (410 Expired).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs
from urllib.request import urlopen

import pytest

from iro_fed.cli import build_parser, main
from iro_fed.k8s import cli as k8s_cli
from iro_fed.k8s.client import LIST_RESTARTS, ClusterCache, Kube, Reflector, check_page_size, list_all
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from iro_fed.problem_io import problem_to_dict


@pytest.fixture(autouse=True)
def _outside_a_cluster(monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def _lists(api: FakeApiServer, path: str) -> list[dict[str, str]]:
    """The query of each list (not watch) request to ``path``, in order."""
    out = []
    for r in api.requests:
        q = {k: v[-1] for k, v in parse_qs(r["query"]).items()}
        if r["method"] == "GET" and r["path"] == path and "watch" not in q:
            out.append({**q, "status": r["status"]})
    return out


def _cluster(api: FakeApiServer, nodes: int = 4, pods: int = 23) -> None:
    for i in range(nodes):
        api.add_node(make_node(f"n{i}", cpu="16", memory="64Gi", zone=f"z{i % 2}"))
    for i in range(pods):
        api.add_pod(make_pod(f"p{i:02d}", cpu=f"{100 + 10 * i}m", memory="256Mi", node=f"n{i % nodes}",
                             namespace=("a", "b")[i % 2], labels={"app": f"app{i % 3}"}))


def _cache(kube: Kube, page_size: int) -> ClusterCache:
    kube.list_page_size = page_size
    cache = ClusterCache(kube, watch_timeout_s=30, refresh_s=0).start()
    assert cache.wait_synced(15)
    return cache


def test_a_relist_in_pages_gives_the_same_cache_and_model_as_one_answer(api: FakeApiServer, kube: Kube) -> None:
    _cluster(api)
    whole = _cache(kube, 0)
    try:
        stores = (dict(whole.nodes.store), dict(whole.pods.store))
        model = problem_to_dict(whole.model().problem)
        versions = (whole.nodes.resource_version, whole.pods.resource_version)
    finally:
        whole.stop()
    assert [q.get("limit") for q in _lists(api, "/api/v1/pods")] == [None]
    api.requests.clear()
    paged = _cache(kube, 5)
    try:
        assert (dict(paged.nodes.store), dict(paged.pods.store)) == stores
        assert [list(s) for s in (paged.nodes.store, paged.pods.store)] == [list(s) for s in stores]  # same order
        assert problem_to_dict(paged.model().problem) == model
        assert (paged.nodes.resource_version, paged.pods.resource_version) == versions
    finally:
        paged.stop()
    pages = _lists(api, "/api/v1/pods")
    assert len(pages) == 5  # 23 pods, 5 a page
    assert all(q["limit"] == "5" and q["fieldSelector"] == "spec.nodeName!=" for q in pages)
    assert "continue" not in pages[0] and all(q.get("continue") for q in pages[1:])
    assert all("resourceVersion" not in q for q in pages)  # the token holds the version
    assert [q["limit"] for q in _lists(api, "/api/v1/nodes")] == ["5"]


def test_the_pages_are_one_read_and_the_watch_starts_from_its_version(api: FakeApiServer, kube: Kube) -> None:
    _cluster(api, nodes=1, pods=9)
    first_version = api._list_body("pods", [], {})["metadata"]["resourceVersion"]
    seen: list[tuple[str, str]] = []

    def between_pages(kind: str, query: dict[str, str]) -> None:
        if kind == "pods" and query.get("continue") and not api.get("pods", "a/late"):
            api.add_pod(make_pod("late", node="n0", namespace="a"))  # after the first page was read
            api.delete("pods", "b/p07")

    api.list_hook = between_pages
    r = Reflector(kube.core.list_pod_for_all_namespaces, "pods", watch_timeout_s=30, page_size=4,
                  on_event=lambda t, o: seen.append((t, o["metadata"]["name"]))).start()
    try:
        assert r.synced.wait(15)
        synced = [name for t, name in seen if t == "SYNC"]
        assert len(synced) == 9 and "late" not in synced and "p07" in synced  # as at the first page's version
        assert api.wait_for(lambda: "a/late" in r.store and "b/p07" not in r.store, 15)  # then from the watch
    finally:
        r.stop()
    assert ("ADDED", "late") in seen and ("DELETED", "p07") in seen
    watches = [q for q in (dict((k, v[-1]) for k, v in parse_qs(x["query"]).items()) for x in api.requests) if "watch" in q]
    assert watches[0]["resourceVersion"] == first_version
    assert r.lists == 1


def test_an_expired_continue_token_starts_the_list_again_and_it_ends_complete(api: FakeApiServer, kube: Kube) -> None:
    _cluster(api, nodes=2, pods=12)
    expired = []

    def compact_once(kind: str, query: dict[str, str]) -> None:
        if kind == "pods" and query.get("continue") and not expired:
            expired.append(query["continue"])
            api.add_pod(make_pod("late", node="n1", namespace="a"))
            api.compact()  # etcd compacted the first page's version: this page gets 410 Expired

    api.list_hook = compact_once
    r = Reflector(kube.core.list_pod_for_all_namespaces, "pods", watch_timeout_s=30, page_size=5).start()
    try:
        assert r.synced.wait(15)
        assert set(r.store) == {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in api.list("pods")}
        assert len(r.store) == 13 and r.errors == 0 and r.lists == 1
    finally:
        r.stop()
    pages = _lists(api, "/api/v1/pods")
    assert [(q["status"], "continue" in q) for q in pages] == [(200, False), (410, True),  # expired: from the start
                                                               (200, False), (200, True), (200, True)]
    assert all(q["limit"] == "5" for q in pages)


def test_a_list_that_keeps_expiring_is_read_in_one_answer(api: FakeApiServer, kube: Kube) -> None:
    _cluster(api, nodes=2, pods=12)

    def compact_always(kind: str, query: dict[str, str]) -> None:
        if kind == "pods" and query.get("continue"):
            api.expire_watches()  # every version handed out so far is compacted away

    api.list_hook = compact_always
    items, version = list_all(kube.core.list_pod_for_all_namespaces, 5, 10.0)
    assert len(items) == 12 and version == api._list_body("pods", [], {})["metadata"]["resourceVersion"]
    pages = _lists(api, "/api/v1/pods")
    assert [(q["status"], q.get("limit")) for q in pages] == [(200, "5"), (410, "5")] * LIST_RESTARTS + [(200, None)]


def test_kube_lists_in_pages(api: FakeApiServer, kube: Kube) -> None:
    _cluster(api, nodes=7, pods=11)
    kube.list_page_size = 3
    nodes, node_version = kube.list_nodes()
    pods, _ = kube.list_pods(field_selector="spec.nodeName=n1")
    assert [n["metadata"]["name"] for n in nodes] == [f"n{i}" for i in range(7)]
    assert node_version == api._list_body("nodes", [], {})["metadata"]["resourceVersion"]
    assert sorted(p["metadata"]["name"] for p in pods) == ["p01", "p08"]
    assert len(_lists(api, "/api/v1/nodes")) == 3


def test_the_loopback_server_speaks_the_api_s_paging(api: FakeApiServer) -> None:
    _cluster(api, nodes=1, pods=5)

    def get(query: str) -> tuple[int, dict[str, Any]]:
        try:
            with urlopen(f"{api.url}/api/v1/pods?{query}") as resp:
                return resp.status, json.load(resp)
        except Exception as exc:  # urllib's HTTPError carries the Status body
            return exc.code, json.load(exc)

    code, first = get("limit=2")
    assert code == 200 and [p["metadata"]["name"] for p in first["items"]] == ["p00", "p01"]  # in the order created
    assert first["metadata"]["remainingItemCount"] == 3 and first["metadata"]["continue"]
    code, second = get(f"limit=2&continue={first['metadata']['continue']}")
    assert code == 200 and second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert [p["metadata"]["name"] for p in second["items"]] == ["p02", "p03"]
    code, selected = get("limit=2&fieldSelector=spec.nodeName%3Dn0")
    assert "remainingItemCount" not in selected["metadata"] and selected["metadata"]["continue"]
    code, last = get(f"limit=2&continue={second['metadata']['continue']}")
    assert [p["metadata"]["name"] for p in last["items"]] == ["p04"] and "continue" not in last["metadata"]
    code, body = get(f"limit=2&resourceVersion=5&continue={first['metadata']['continue']}")
    assert code == 400 and "resource version is not allowed when using continue" in body["message"]
    code, body = get("limit=2&continue=garbage")
    assert code == 400 and body["reason"] == "BadRequest" and "continue key is not valid" in body["message"]
    code, again = get("limit=2")
    api.delete("pods", "a/p04")
    api.compact()  # that list's version is compacted away
    code, body = get(f"limit=2&continue={again['metadata']['continue']}")
    assert (code, body["kind"], body["reason"], body["code"]) == (410, "Status", "Expired", 410)


@pytest.mark.parametrize("bad", [-1, 2.5, "500", True, None])
def test_a_bad_page_size_is_a_clear_error(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"page_size: must be a whole number >= 0 .*got"):
        Reflector(lambda **kw: None, "nodes", page_size=bad)
    with pytest.raises(ValueError, match="page_size: must be a whole number"):
        list_all(lambda **kw: None, bad, 1.0)
    assert check_page_size("page_size", 0) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["scheduler", "--kubeconfig", __file__, "--list-page-size", "-1"], "--list-page-size: must be between 0 and 100000, got -1"),
        (["scheduler", "--kubeconfig", __file__, "--list-page-size", "1000001"], "--list-page-size: must be between 0 and 100000"),
        (["extender", "--port", "0", "--list-page-size", "100"], "--list-page-size: needs --kubeconfig or --watch"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--list-page-size", "100"],
         "--list-page-size: needs --mode affinity"),
    ],
)
def test_a_bad_list_page_size_flag_exits_2_naming_it(argv: list[str], message: str, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err


def test_the_list_page_size_flag_reaches_every_list(api: FakeApiServer, kubeconfig: str) -> None:
    parse = build_parser().parse_args
    parts = k8s_cli.build_scheduler(parse(["scheduler", "--kubeconfig", kubeconfig, "--no-leader-elect",
                                           "--list-page-size", "7"]))
    s = parts.scheduler
    assert {r.page_size for r in (s.cache.nodes, s.cache.pods, s.pending)} == {7}
    default = k8s_cli.build_scheduler(parse(["scheduler", "--kubeconfig", kubeconfig, "--no-leader-elect"])).scheduler
    assert {r.page_size for r in (default.cache.nodes, default.cache.pods, default.pending)} == {500}
