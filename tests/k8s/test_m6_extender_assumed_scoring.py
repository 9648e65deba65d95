"""The extender's assumed pods (bound through /bind, not yet counted by the node cache) count for
kube-default's PodTopologySpread and InterPodAffinity scoring, as the IroScheduler's do (m6 item 5)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from iro_fed.k8s.client import ClusterCache  # noqa: E402
from iro_fed.k8s.extender import Extender, ExtenderServer  # noqa: E402
from iro_fed.k8s.testing import make_node, make_pod  # noqa: E402
from tests.k8s.helpers import post_json, serving  # noqa: E402


@pytest.fixture
def serve():
    yield from serving(lambda ext: ExtenderServer(ext, "127.0.0.1", 0, "/iro"))


@pytest.fixture
def cache(api, kube):
    """n1 (8 cpu, zone z1) is emptier by resources than n2 (2 cpu, zone z2); the model is rebuilt only
    when a test asks."""
    api.add_node(make_node("n1", cpu="8", memory="4Gi", zone="z1"))
    api.add_node(make_node("n2", cpu="2", memory="4Gi", zone="z2"))
    c = ClusterCache(kube, watch_timeout_s=5, refresh_s=3600).start()
    assert c.wait_synced(10)
    c.model()
    yield c
    c.stop()


def _replica(api, name: str) -> dict[str, Any]:
    pod = make_pod(name, cpu="100m", memory="64Mi", labels={"app": "web"})
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-web",
                                           "controller": True}]
    return api.add_pod(copy.deepcopy(pod))


def _scores(url: str, pod: dict[str, Any]) -> dict[str, int]:
    status, res = post_json(url, "/iro/prioritize", {"Pod": pod, "NodeNames": ["n1", "n2"], "Nodes": None})
    assert status == 200, res
    return {h["Host"]: h["Score"] for h in res}


def test_two_replicas_bound_back_to_back_through_the_extender_are_spread(api, cache, kube, serve):
    srv = serve(Extender("kube-default", cache=cache, kube=kube, solver_weight=1.0))
    r1, r2 = _replica(api, "r1"), _replica(api, "r2")
    first = _scores(srv.url, r1)
    assert first["n1"] > first["n2"]  # by resources alone n1 wins
    status, res = post_json(srv.url, "/iro/bind", {"PodName": "r1", "PodNamespace": "default",
                                                   "PodUID": r1["metadata"]["uid"], "Node": "n1"})
    assert status == 200 and res == {"Error": ""}, res
    # r1 is assumed on n1 (the cache model does not count it yet): the system default spreading of
    # the ReplicaSet's replicas now sends r2 to n2, as kube-scheduler's assumed pod would.
    second = _scores(srv.url, r2)
    assert second["n2"] > second["n1"], second
