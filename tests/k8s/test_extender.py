"""The scheduler extender over real HTTP, driven like kube-scheduler drives it.

Upstream's cases (pkg/scheduler/extender_test.go, TestSchedulerWithExtenders) are replayed with
``schedule_with_extenders`` (kube-scheduler's extender steps) against our extender server and
small in-process fake extenders standing in for the other extenders of those cases.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

import numpy as np
import pytest

import solvers
from iro_fed.k8s.client import ClusterCache
from iro_fed.k8s.extender import MAX_EXTENDER_PRIORITY, Extender, ExtenderServer
from iro_fed.k8s.snapshot import ClusterModel
from iro_fed.k8s.testing import (
    ExtenderError,
    FitError,
    HTTPExtenderClient,
    InjectedError,
    make_node,
    make_pod,
    schedule_with_extenders,
)
from iro_fed.model import ClusterState
from iro_fed.objective import marginal
from tests.k8s.helpers import serving


@pytest.fixture
def serve():
    yield from serving(lambda ext, prefix="/iro": ExtenderServer(ext, "127.0.0.1", 0, prefix))


def post(url: str, path: str, body: bytes | Any) -> tuple[int, Any]:
    host, port = url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, json.loads(raw) if raw else None


def cluster() -> list[dict[str, Any]]:
    return [
        make_node("machine1", cpu="8", memory="16Gi", zone="z1"),
        make_node("machine2", cpu="2", memory="4Gi", zone="z2"),
        make_node("machine3", cpu="8", memory="16Gi", zone="z1", taints=[{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]),
    ]


class FakeExtender:
    """An in-process extender like upstream's FakeExtender: predicates and a prioritizer."""

    def __init__(self, passes=None, error=False, scores=None, weight=1, ignorable=False, managed=(), binder=False):
        self.passes, self.error, self.scores, self.weight = passes, error, scores, weight
        self.ignorable, self.managed, self.binder = ignorable, set(managed), binder
        self.calls = 0
        self.bound: list[tuple[str, str]] = []

    def is_interested(self, pod):
        if not self.managed:
            return True
        return any(self.managed & set((c.get("resources") or {}).get("requests") or {}) for c in pod["spec"]["containers"])

    def is_binder(self):
        return self.binder

    def filter(self, pod, nodes):
        self.calls += 1
        if self.error:
            raise ExtenderError("some error")
        ok = [n for n in nodes if self.passes is None or n["metadata"]["name"] in self.passes]
        failed = {n["metadata"]["name"]: "FakeExtender failed" for n in nodes if n not in ok}
        return ok, failed, {}

    def prioritize(self, pod, nodes):
        self.calls += 1
        if self.error:
            raise ExtenderError("some error")
        return [{"Host": n["metadata"]["name"], "Score": (self.scores or {}).get(n["metadata"]["name"], 0)} for n in nodes], self.weight

    def bind(self, pod, node):
        self.bound.append((pod["metadata"]["name"], node))


# --- protocol, NodeList mode ------------------------------------------------------------------


def test_filter_nodelist_mode_returns_nodes_and_reasons(serve):
    srv = serve(Extender("best-fit"))
    status, res = post(srv.url, "/iro/filter", {"Pod": make_pod("p", cpu="4"), "Nodes": {"items": cluster()}, "NodeNames": None})
    assert status == 200
    assert res["Error"] == ""
    assert res["NodeNames"] is None
    assert [n["metadata"]["name"] for n in res["Nodes"]["items"]] == ["machine1"]
    assert res["Nodes"]["items"][0] == cluster()[0]  # the Node objects it was given, unchanged
    assert res["FailedNodes"] == {"machine2": "Insufficient cpu"}  # resolvable by preemption
    assert res["FailedAndUnresolvableNodes"] == {"machine3": "node(s) had untolerated taint {dedicated: batch}"}


def test_prioritize_scores_are_0_to_10_and_follow_solver_and_objective(serve):
    ext = Extender("best-fit", solver_weight=1.0)
    srv = serve(ext)
    nodes = [make_node("big", cpu="16", memory="64Gi"), make_node("snug", cpu="2", memory="4Gi"), make_node("mid", cpu="4", memory="8Gi")]
    pod = make_pod("p", cpu="1500m", memory="2Gi")
    status, res = post(srv.url, "/iro/prioritize", {"Pod": pod, "Nodes": {"items": nodes}})
    assert status == 200
    assert [h["Host"] for h in res] == ["big", "snug", "mid"]
    assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= MAX_EXTENDER_PRIORITY for h in res)
    scores = {h["Host"]: h["Score"] for h in res}
    assert scores["snug"] == 10 and scores["big"] == 0  # best-fit's ranking, min-max normalized
    # With weight 0 on the solver the score is the objective's marginal change of R.
    ext.solver_weight = 0.0
    _, res = post(srv.url, "/iro/prioritize", {"Pod": pod, "Nodes": {"items": nodes}})
    model = ClusterModel(nodes, None)
    snap = model.with_pods([pod])
    delta = marginal(snap.problem, ClusterState(snap.problem), 0)
    best = snap.problem.nodes[int(np.argmax(delta))].name
    worst = snap.problem.nodes[int(np.argmin(delta))].name
    got = {h["Host"]: h["Score"] for h in res}
    assert got[best] == 10 and got[worst] == 0


def test_infeasible_nodes_score_zero(serve):
    srv = serve(Extender("greedy-objective"))
    _, res = post(srv.url, "/iro/prioritize", {"Pod": make_pod("p", cpu="4"), "Nodes": {"items": cluster()}})
    scores = {h["Host"]: h["Score"] for h in res}
    assert scores == {"machine1": 10, "machine2": 0, "machine3": 0}


def test_a_failing_solver_falls_back_to_the_kube_default_ranking(serve):
    ext = Extender("best-fit", solver_weight=1.0)

    def broken(*a, **k):
        raise RuntimeError("solver exploded")

    ext.solver.score = broken
    srv = serve(ext)
    nodes = [make_node("big", cpu="16", memory="64Gi"), make_node("snug", cpu="2", memory="4Gi")]
    status, res = post(srv.url, "/iro/prioritize", {"Pod": make_pod("p", cpu="1500m", memory="2Gi"), "Nodes": {"items": nodes}})
    assert status == 200
    # kube-default (LeastAllocated) prefers the emptier node: the opposite of best-fit
    assert {h["Host"]: h["Score"] for h in res} == {"big": 10, "snug": 0}
    assert ext.stats["solver_fallbacks"] == 1


def test_batch_solver_ranks_its_chosen_node_first(serve):
    pytest.importorskip("ortools")
    srv = serve(Extender("cpsat", {"time_limit_s": 5.0}, solver_weight=1.0))
    nodes = [make_node("a", cpu="4"), make_node("b", cpu="2")]
    _, res = post(srv.url, "/iro/prioritize", {"Pod": make_pod("p", cpu="1"), "Nodes": {"items": nodes}})
    scores = {h["Host"]: h["Score"] for h in res}
    assert sorted(scores.values()) == [0, 10]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (json.dumps({"Nodes": {"items": []}}).encode(), "Pod"),
        (json.dumps({"Pod": {"metadata": {}}, "Nodes": {"items": []}}).encode(), "Pod.metadata.name"),
        (json.dumps({"Pod": make_pod("p")}).encode(), "one of Nodes"),
        (json.dumps({"Pod": make_pod("p"), "Nodes": {"items": [{"metadata": {"name": "a"}, "spec": []}]}}).encode(),
         "Nodes.items[0].spec"),
        (json.dumps({"Pod": make_pod("p"), "NodeNames": "n1"}).encode(), "NodeNames"),
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_malformed_requests_get_400_with_a_message(serve, body, fragment, verb):
    srv = serve(Extender())
    status, res = post(srv.url, f"/iro/{verb}", body)
    assert status == 400
    assert fragment in res["Error"]


def test_invalid_pod_quantity_is_a_filter_error_and_a_prioritize_400(serve):
    srv = serve(Extender())
    args = {"Pod": make_pod("p", cpu="lots"), "Nodes": {"items": cluster()}}
    status, res = post(srv.url, "/iro/filter", args)
    assert status == 200 and "requests.cpu: invalid quantity 'lots'" in res["Error"]
    status, res = post(srv.url, "/iro/prioritize", args)
    assert status == 400 and "invalid quantity" in res["Error"]


def test_unknown_verb_and_prefix(serve):
    srv = serve(Extender(), prefix="")
    assert post(srv.url, "/filter", {"Pod": make_pod("p"), "Nodes": {"items": cluster()}})[0] == 200
    assert post(srv.url, "/nope", {})[0] == 404


def test_nodenames_without_a_cache_is_an_error_that_says_how_to_configure(serve):
    srv = serve(Extender())
    _, res = post(srv.url, "/iro/filter", {"Pod": make_pod("p"), "NodeNames": ["machine1"]})
    assert "nodeCacheCapable: false" in res["Error"]


# --- nodeCacheCapable mode, bind and preempt against the loopback API server -----------------


@pytest.fixture
def cached(api, kube):
    for n in cluster():
        api.add_node(n)
    api.add_pod(make_pod("running", cpu="6", node="machine1"))
    cache = ClusterCache(kube, watch_timeout_s=5).start()
    assert cache.wait_synced(10)
    yield cache
    cache.stop()


def test_node_cache_mode_uses_bound_pods_and_answers_with_names(serve, api, kube, cached):
    srv = serve(Extender("best-fit", cache=cached, kube=kube))
    # machine1 has 8 cpu with 6 used: a 3-cpu pod fits nowhere; 1.5 cpu fits machine1 and machine2
    status, res = post(srv.url, "/iro/filter", {"Pod": make_pod("p", cpu="3"), "NodeNames": ["machine1", "machine2", "machine3"]})
    assert status == 200 and res["Error"] == ""
    assert res["Nodes"] is None and res["NodeNames"] == []
    assert res["FailedNodes"] == {"machine1": "Insufficient cpu", "machine2": "Insufficient cpu"}
    _, res = post(srv.url, "/iro/filter", {"Pod": make_pod("p", cpu="1500m"), "NodeNames": ["machine2", "machine1", "ghost"]})
    assert res["NodeNames"] == ["machine2", "machine1"]  # never a name that was not asked about
    assert "ghost" in res["FailedNodes"]
    # the watch keeps the cache current: a new pod on machine2 shows up in the next answer
    api.add_pod(make_pod("more", cpu="1", node="machine2"))
    assert api.wait_for(lambda: "default/more" in cached.pods.store, 10)
    assert cached.wait_fresh(10)
    _, res = post(srv.url, "/iro/filter", {"Pod": make_pod("p", cpu="1500m"), "NodeNames": ["machine1", "machine2"]})
    assert res["NodeNames"] == ["machine1"]


def test_bind_creates_the_binding_once_and_reports_conflicts_without_retry(serve, api, kube, cached):
    srv = serve(Extender(cache=cached, kube=kube))
    pod = api.add_pod(make_pod("web"))
    args = {"PodName": "web", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "machine2"}
    status, res = post(srv.url, "/iro/bind", args)
    assert (status, res) == (200, {"Error": ""})
    assert api.get("pods", "default/web")["spec"]["nodeName"] == "machine2"
    status, res = post(srv.url, "/iro/bind", dict(args, Node="machine1"))
    assert status == 200 and "409" in res["Error"] and "already assigned" in res["Error"]
    assert [r["status"] for r in api.requests_to("POST", r"/pods/web/binding$")] == [201, 409]  # one POST each, no retry
    # a server error is reported, not retried either
    api.add_pod(make_pod("api"))

    def fail(ns, name, body):
        raise InjectedError(500, "InternalError", "etcd timeout")

    api.binding_hook = fail
    _, res = post(srv.url, "/iro/bind", {"PodName": "api", "PodNamespace": "default", "PodUID": "", "Node": "machine1"})
    assert "500" in res["Error"]
    assert len(api.requests_to("POST", r"/pods/api/binding$")) == 1
    assert post(srv.url, "/iro/bind", {"PodName": "api"})[0] == 400


def test_the_client_cannot_read_the_bind_reply_without_preload_content_false(api, kube):
    """Why bind uses _preload_content=False (kubernetes-client/python #547, #825): the API server
    answers a Binding with a v1.Status, the client fails to read it, yet the bind happened."""
    from kubernetes import client

    api.add_node(make_node("n1"))
    api.add_pod(make_pod("p"))
    body = client.V1Binding(metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(kind="Node", name="n1", api_version="v1"))
    with pytest.raises(Exception, match="validation error for V1Binding"):
        kube.core.create_namespaced_pod_binding("p", "default", body)
    assert api.get("pods", "default/p")["spec"]["nodeName"] == "n1"  # yet the pod is bound
    assert kube.bind("default", "p", "n1").status == 409  # so a retry would only get a conflict


def test_preempt_keeps_nodes_where_the_victims_make_room(serve, api, kube, cached):
    srv = serve(Extender(cache=cached, kube=kube))
    victim = api.get("pods", "default/running")
    args = {
        "Pod": make_pod("urgent", cpu="4"),
        "NodeNameToMetaVictims": {
            "machine1": {"Pods": [{"UID": victim["metadata"]["uid"]}], "NumPDBViolations": 0},  # 8 cpu free after
            "machine2": {"Pods": [], "NumPDBViolations": 1},  # 2 cpu: never enough
            "machine3": {"Pods": [], "NumPDBViolations": 0},  # taint: unresolvable
        },
    }
    status, res = post(srv.url, "/iro/preempt", args)
    assert status == 200
    assert res == {"NodeNameToMetaVictims": {"machine1": {"Pods": [{"UID": victim["metadata"]["uid"]}], "NumPDBViolations": 0}}}


def test_set_node_usage_leaves_the_state_of_a_problem_with_that_usage():
    """The preempt check's what-if (a node without its victims) through ClusterState's public
    method: every aggregate equals a fresh state of the problem with that usage, and putting the
    problem's usage back restores the state exactly."""
    from iro_fed.problem_io import problem_from_dict
    from iro_fed.testing import random_problem_doc

    fields = ("allocated", "free", "gpu_free", "gpu_full", "gpu_max_free", "gpu_left", "gpu_used", "on",
              "util_used_total", "util_cap_on", "util_free", "free_share")
    doc = random_problem_doc(3, nodes=6, pods=4)
    problem = problem_from_dict(doc)
    n = next(i for i, node in enumerate(doc["nodes"]) if node.get("gpus", 0) >= 2)
    node = doc["nodes"][n]
    new_alloc = {"cpu": node["capacity"]["cpu"] // 2, "memory": 0}
    new_cards = [250] + [1000] * (node["gpus"] - 1)
    changed = dict(doc, nodes=[*doc["nodes"][:n], dict(node, allocated=new_alloc, gpu_free_milli=new_cards),
                               *doc["nodes"][n + 1:]])
    expected = ClusterState(problem_from_dict(changed))
    fresh = ClusterState(problem)
    state = ClusterState(problem)
    state.set_node_usage(n, np.array([new_alloc[r] for r in problem.resources], dtype=np.float64), np.array(new_cards))
    for f in fields:
        assert np.allclose(getattr(state, f), getattr(expected, f)), f
    state.set_node_usage(n, problem.allocated[n], problem.gpu_free[n])
    for f in fields:
        assert np.allclose(getattr(state, f), getattr(fresh, f)), f
    # a node that holds a placed workload has no base usage to set apart from it
    w = int(np.flatnonzero(problem.wl_gpu_count == 0)[0])
    state.place(w, n)
    with pytest.raises(ValueError, match="placed workload"):
        state.set_node_usage(n, problem.allocated[n], problem.gpu_free[n])


# --- upstream's TestSchedulerWithExtenders, with our extender in the loop ---------------------


@pytest.fixture
def iro_client(serve):
    srv = serve(Extender("best-fit"))
    return HTTPExtenderClient(srv.url)


def test_upstream_all_extenders_pass(iro_client):
    host = schedule_with_extenders(make_pod("p", cpu="1"), cluster()[:2], [iro_client, FakeExtender()])
    assert host in ("machine1", "machine2")


def test_upstream_an_erroring_filter_fails_the_pod(iro_client):
    with pytest.raises(ExtenderError, match="some error"):
        schedule_with_extenders(make_pod("p", cpu="1"), cluster(), [iro_client, FakeExtender(error=True)])
    # and our extender's own filter error (an unreadable pod) fails it too
    with pytest.raises(ExtenderError, match="invalid quantity"):
        schedule_with_extenders(make_pod("p", cpu="x1"), cluster(), [iro_client])


def test_upstream_intersecting_filters(iro_client):
    # ours drops machine2 (cpu) and machine3 (taint); the fake keeps machine1 and machine2
    host = schedule_with_extenders(make_pod("p", cpu="4"), cluster(), [iro_client, FakeExtender(passes={"machine1", "machine2"})])
    assert host == "machine1"


def test_upstream_disjoint_filters_fail_with_every_reason(iro_client):
    with pytest.raises(FitError) as err:
        schedule_with_extenders(make_pod("p", cpu="4"), cluster(), [iro_client, FakeExtender(passes={"machine2"})])
    statuses = err.value.statuses
    assert statuses["machine2"] == ["Insufficient cpu"]
    assert statuses["machine1"] == ["FakeExtender failed"]
    assert "untolerated taint" in statuses["machine3"][0]


def test_upstream_an_erroring_prioritizer_is_ignored(serve):
    ours = HTTPExtenderClient(serve(Extender("best-fit")).url, weight=1)
    nodes = [make_node("big", cpu="16"), make_node("snug", cpu="2")]
    host = schedule_with_extenders(make_pod("p", cpu="1500m"), nodes, [FakeExtender(error=False, scores={}), ours,
                                                                       _ErroringPrioritizer(scores={"big": 10})])
    assert host == "snug"  # only ours scored; the erroring one did not fail scheduling


class _ErroringPrioritizer(FakeExtender):
    def prioritize(self, pod, nodes):
        raise ExtenderError("prioritize error")


def test_upstream_weights_decide_between_prioritizers(serve):
    nodes = [make_node("big", cpu="16"), make_node("snug", cpu="2")]
    pod = make_pod("p", cpu="1500m")
    ours = HTTPExtenderClient(serve(Extender("best-fit", solver_weight=1.0)).url, weight=1)  # snug 10, big 0
    other = FakeExtender(scores={"big": 5}, weight=1)
    assert schedule_with_extenders(pod, nodes, [ours, other]) == "snug"  # 10*1 > 5*1
    other.weight = 3
    assert schedule_with_extenders(pod, nodes, [ours, other]) == "big"  # 5*3 > 10*1
    ours.weight = 2
    assert schedule_with_extenders(pod, nodes, [ours, other]) == "snug"  # 10*2 > 5*3


def test_upstream_an_uninterested_extender_is_never_called(serve):
    ext = Extender("best-fit")
    srv = serve(ext)
    ours = HTTPExtenderClient(srv.url, managed_resources=("nvidia.com/gpu",))
    host = schedule_with_extenders(make_pod("cpu-only", cpu="1"), cluster()[:2], [ours, FakeExtender(passes={"machine2"})])
    assert host == "machine2"
    assert ext.stats["filter"] == ext.stats["prioritize"] == 0
    schedule_with_extenders(make_pod("gpu", cpu="1", gpus=1), [make_node("g1", gpus=2)], [ours])
    assert ext.stats["filter"] == 1 and ext.stats["prioritize"] == 1


def test_upstream_an_ignorable_failing_extender_is_skipped(serve):
    srv = serve(Extender())
    url = srv.url
    srv.shutdown()
    srv.server_close()  # unreachable now
    down = HTTPExtenderClient(url, ignorable=True, timeout_s=2)
    host = schedule_with_extenders(make_pod("p", cpu="4"), cluster(), [down, FakeExtender(passes={"machine1"})])
    assert host == "machine1"
    down.ignorable = False
    with pytest.raises(ExtenderError):
        schedule_with_extenders(make_pod("p", cpu="4"), cluster(), [down, FakeExtender(passes={"machine1"})])


def test_upstream_bind_only_extender_binds_through_the_api(serve, api, kube):
    for n in cluster():
        api.add_node(n)
    pod = api.add_pod(make_pod("web", cpu="1"))
    binder = HTTPExtenderClient(serve(Extender(kube=kube)).url, filter_verb="", prioritize_verb="", bind_verb="bind")
    host = schedule_with_extenders(pod, cluster()[:2], [FakeExtender(passes={"machine2"}), binder])
    assert host == "machine2"
    assert api.get("pods", "default/web")["spec"]["nodeName"] == "machine2"
    assert len(api.requests_to("POST", "/binding$")) == 1


def test_node_cache_capable_client_rejects_names_not_asked_about(serve, api, kube, cached):
    ours = HTTPExtenderClient(serve(Extender(cache=cached, kube=kube)).url, node_cache_capable=True)
    host = schedule_with_extenders(make_pod("p", cpu="1500m"), cluster(), [ours])
    assert host in ("machine1", "machine2")


# --- robustness: fuzzed bodies never crash the server -----------------------------------------


def test_fuzzed_requests_get_200_or_400_and_the_server_survives(serve):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    srv = serve(Extender())
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=20,
    )
    pod_like = st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": st.text(min_size=1, max_size=5)}),
                                      "spec": json_values})
    bodies = st.one_of(
        st.binary(max_size=64),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.fixed_dictionaries({"Pod": pod_like, "Nodes": st.just({"items": cluster()})}).map(lambda v: json.dumps(v).encode()),
    )

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(body=bodies, verb=st.sampled_from(["filter", "prioritize", "bind", "preempt"]))
    def check(body, verb):
        status, res = post(srv.url, f"/iro/{verb}", body)
        assert status in (200, 400), (status, res)
        if status == 400:
            assert res["Error"]

    check()
    assert post(srv.url, "/iro/filter", {"Pod": make_pod("p"), "Nodes": {"items": cluster()}})[0] == 200
    assert srv.extender.stats["errors"] == 0


def test_solver_and_weight_settings_are_checked():
    with pytest.raises(solvers.InvalidSettingError):
        Extender("no-such-solver")
    with pytest.raises(ValueError, match="solver_weight"):
        Extender(solver_weight=1.5)
