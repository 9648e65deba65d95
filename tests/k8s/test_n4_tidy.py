"""The tidy of n4: one definition of what a placed pod's rules keep (PodRules.placed, read by the
scheduler's batch check), the scheduler's conflict check through ClusterModel.placement_conflict,
bound_view in one walk, and the pod-scoring counts of a cached model built with it (not in the
first review after each rebuild) where the webhook's or extender's solver reads pod scoring."""

from __future__ import annotations

import types
from typing import Any

import pytest

from iro_fed.k8s.client import ClusterCache
from iro_fed.k8s.extender import Extender
from iro_fed.k8s.snapshot import ClusterModel, PlacedPods, bound_view, pod_rules
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.k8s.webhook import Webhook

ZONE = "topology.kubernetes.io/zone"


def _pods() -> list[dict[str, Any]]:
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}]}}
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "api"}}, "topologyKey": ZONE}]}}
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    return [
        make_pod("db", labels={"app": "db"}, affinity=anti, ports=[{"containerPort": 5432, "hostPort": 5432}]),
        make_pod("web", labels={"app": "web"}, affinity=aff, topology_spread=spread, node_selector={"disk": "ssd"},
                 tolerations=[{"key": "k", "operator": "Exists"}]),
        make_pod("plain", namespace="other", labels={"x": "y"}),
    ]


@pytest.mark.parametrize("i", range(3))
def test_a_pending_pods_rules_as_placed_are_the_placed_pods_rules(i: int) -> None:
    pod = _pods()[i]
    assert pod_rules(pod).placed() == pod_rules(pod, pending=False)


def test_placement_conflict_on_rules_parsed_once_with_a_batch_memo_is_the_models_verdict() -> None:
    nodes = [make_node(f"n{i}", zone=f"z{i % 2}") for i in range(4)]
    bound = [make_pod("db0", labels={"app": "db"}, node="n0")]
    model = ClusterModel(nodes, bound)
    pod = _pods()[0]
    earlier = PlacedPods()
    earlier.add("n1", pod_rules(make_pod("db1", labels={"app": "db"})).placed())
    memo: dict[Any, Any] = {}
    for n in ("n0", "n1", "n2", "n3"):
        assert model.placement_conflict(pod, n, earlier, pod_rules(pod), memo) == model.placement_conflict(pod, n, earlier)
    assert model.placement_conflict(pod, "n2", earlier) is not None  # z0 holds db0 (anti-affinity)


def test_bound_view_keeps_the_ports_of_every_container() -> None:
    pod = make_pod("p", ports=[{"containerPort": 80, "hostPort": 8080}])
    pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox", "ports": [{"containerPort": 9}],
                                      "resources": {"requests": {"cpu": "1"}}}, "not an object"]
    view = bound_view(pod)
    assert view["spec"]["containers"] == [{"name": "app", "resources": pod["spec"]["containers"][0]["resources"],
                                           "ports": pod["spec"]["containers"][0]["ports"]}]
    assert view["spec"]["initContainers"] == [{"name": "init", "resources": {"requests": {"cpu": "1"}},
                                               "ports": [{"containerPort": 9}]}, "not an object"]


def _cache() -> Any:
    """A ClusterCache's build on two stores (no API server: the reflectors are stand-ins)."""
    cache = ClusterCache(types.SimpleNamespace(core=types.SimpleNamespace(list_node=None, list_pod_for_all_namespaces=None)),
                         refresh_s=0)
    spread = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
              "labelSelector": {"matchLabels": {"app": "web"}}}
    cache.nodes.store = {f"n{i}": make_node(f"n{i}", zone=f"z{i % 2}") for i in range(3)}
    cache.pods.store = {f"default/w{i}": make_pod(f"w{i}", node="n0", labels={"app": "web"}, topology_spread=[spread])
                        for i in range(3)}
    return cache


@pytest.mark.parametrize(("solver", "built"), [("kube-default", True), ("greedy-objective", False)])
def test_the_webhooks_cache_builds_the_pod_scoring_counts_with_each_model(solver: str, built: bool) -> None:
    cache = _cache()
    hook = Webhook("affinity", cache=cache, solver=solver)
    try:
        assert cache.scoring is built
        model = cache.model()
        assert (model._bound_scoring is not None) is built  # before any review
    finally:
        hook.close()


def test_the_extenders_cache_builds_them_where_its_solver_or_fallback_reads_them() -> None:
    cache = _cache()
    Extender("greedy-objective", cache=cache)  # its fallback, kube-default, reads pod scoring
    assert cache.scoring and cache.model()._bound_scoring is not None
    other = _cache()
    Extender("greedy-objective", cache=other, fallback_solver="greedy-objective")
    assert not other.scoring and other.model()._bound_scoring is None


def test_a_review_on_the_prebuilt_counts_ranks_as_before() -> None:
    cache = _cache()
    plain = ClusterModel(list(cache.nodes.store.values()), list(cache.pods.store.values()))
    pod = make_pod("new", labels={"app": "web"}, topology_spread=[{
        "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}])
    hook = Webhook("affinity", cache=cache, solver="kube-default", top_k=3)
    try:
        cache.nodes.synced.set()
        cache.pods.synced.set()
        ranked = hook.recommend(pod, "default")
    finally:
        hook.close()
    snap = plain.with_pods([dict(pod, metadata=dict(pod["metadata"], namespace="default"))])
    assert snap.problem.pod_scoring is not None
    assert ranked[0][0] == "n1"  # zone z1 has none of the app's pods
