"""``iro scheduler`` keeps the bound pods' parsed rules (``PlacedPods`` entries) across batches by
(uid, resourceVersion): with one bound pod with required anti-affinity every batch reads all the
bound pods, and each used to parse them all again. Loopback API server, real kubernetes client."""

from __future__ import annotations

from typing import Any

import pytest

import iro_fed.k8s.snapshot as snapshot
from iro_fed.k8s.snapshot import ClusterModel, PodSpecError, placed_pods
from iro_fed.k8s.testing import make_node, make_pod
from tests.k8s.helpers import HOST, cycle, make_scheduler


def anti(app: str) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOST}]}}


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The bound pods parsed for the pod-reading plugins (pod_rules with pending=False), by name."""
    calls: list[str] = []
    real = snapshot.pod_rules

    def spy(pod, pending=True):
        if not pending:
            calls.append(pod["metadata"]["name"])
        return real(pod, pending)

    monkeypatch.setattr(snapshot, "pod_rules", spy)
    return calls


def test_a_batch_parses_only_the_bound_pods_that_changed(api, kubeconfig, clock, parses):
    """40 bound pods, one of them with anti-affinity: the first batch parses them all, the next
    ones only the pod bound since (and the one relabelled); a pod deleted leaves the cache.
    Before: every batch parsed every bound pod."""
    for i in range(4):
        api.add_node(make_node(f"n{i}", cpu="64"))
    api.add_pod(make_pod("guard", cpu="100m", node="n0", labels={"app": "guard"}, affinity=anti("web")))
    for i in range(39):
        api.add_pod(make_pod(f"b{i}", cpu="100m", node=f"n{i % 4}", labels={"app": "b"}))
    api.add_pod(make_pod("w0", cpu="100m", scheduler="iro", labels={"app": "w"}))
    s = make_scheduler(kubeconfig, clock)
    try:
        first = cycle(s)
        assert [o.status for o in first.pods] == ["bound"]
        assert len(parses) == 40
        api.add_pod(make_pod("w1", cpu="100m", scheduler="iro", labels={"app": "w"}))
        parses.clear()
        second = cycle(s)
        assert [o.status for o in second.pods] == ["bound"]
        assert parses == ["w0"]  # bound by the first batch: a new version
        b3 = api.get("pods", "default/b3")
        b3["metadata"]["labels"] = {"app": "b", "tier": "x"}  # a new version: parsed again
        api.update("pods", b3)
        api.delete("pods", "default/b7")
        api.add_pod(make_pod("w2", cpu="100m", scheduler="iro", labels={"app": "w"}))
        parses.clear()
        third = cycle(s)
        assert [o.status for o in third.pods] == ["bound"]
        assert sorted(parses) == ["b3", "w1"]
        keys = {(p["metadata"]["uid"], p["metadata"]["resourceVersion"]) for p in api.list("pods")
                if p["spec"].get("nodeName") and p["metadata"]["name"] != "w2"}
        assert set(s._placed_rules) == keys  # b7 and the old versions of b3 and w1 are gone
    finally:
        s.stop()


def test_the_cache_gives_what_a_fresh_parse_gives():
    """The placed pods from the cache are those of a fresh parse; an unreadable pod is warned about
    each time and still left out; a pod without uid or resourceVersion is parsed and not kept."""
    good = make_pod("a", node="n0", labels={"app": "a"}, affinity=anti("a"), ports=[{"containerPort": 80, "hostPort": 80}])
    bad = make_pod("bad", node="n0", labels={"app": "bad"})
    bad["spec"]["affinity"] = {"podAntiAffinity": "oops"}
    bare = make_pod("bare", node="n1", labels={"app": "c"})
    for i, pod in enumerate((good, bad)):
        pod["metadata"].update(uid=f"u{i}", resourceVersion="7")
    by_node = {"n0": [good, bad], "n1": [bare]}
    cache: dict[Any, Any] = {}
    fresh_warnings: list[str] = []
    fresh = placed_pods(by_node, fresh_warnings)
    for _ in range(2):
        warnings: list[str] = []
        cached = placed_pods(by_node, warnings, cache)
        assert list(cached.pods()) == list(fresh.pods())
        assert warnings == fresh_warnings and len(warnings) == 1
        assert cached.anti == fresh.anti and cached.ports == fresh.ports
        assert set(cache) == {("u0", "7"), ("u1", "7")}
        assert isinstance(cache[("u1", "7")], PodSpecError)
    model = ClusterModel([make_node("n0"), make_node("n1")], [good, bad, bare], rules_cache=cache)
    assert list(model.placed().pods()) == list(fresh.pods())
