"""``iro scheduler``'s account of a batch after its check in queue order (pods moved, deferred or
placed after the pods they wait for): each Scheduled Event's runner-up is a node the pod could have
used beside the pods placed before it; ``BatchResult.score`` scores the placement as bound; a pod
refused for affinity to a pod of its batch is placed after it in the same batch where a node passes
(else left for the next batch). Loopback API server, real kubernetes client."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from iro_fed.objective import evaluate
from tests.k8s.helpers import ZONE, affinity, anti, cycle, make_scheduler, relist, settle, spread


def node_of(api: FakeApiServer, name: str) -> str | None:
    return api.get("pods", f"default/{name}")["spec"].get("nodeName")


def scheduled_events(api: FakeApiServer) -> dict[str, str]:
    return {e["involvedObject"]["name"]: e["message"] for e in api.list("events") if e["reason"] == "Scheduled"}


def solves(s: Any) -> list[tuple[Any, Any]]:
    """(problem, placement) of each solve of ``s``'s solver."""
    got: list[tuple[Any, Any]] = []
    real = s.solver.solve

    def spy(problem):
        placement = real(problem)
        got.append((problem, placement))
        return placement

    s.solver.solve = spy
    return got


def test_a_runner_up_is_never_a_node_a_pod_before_it_took(api, kubeconfig, clock):
    """Five hostname-anti-affine replicas on six nodes: the joint solve stacks them, the batch check
    spreads them. Each replica's runner-up is free of the replicas before it in queue order; the
    last one's only such node is the one left empty. Before: the best other node by the
    objective, most often one a replica before it took."""
    for i in range(6):
        api.add_node(make_node(f"n{i}", cpu="16"))
    for i in range(5):
        api.add_pod(make_pod(f"r{i}", cpu="1", scheduler="iro", labels={"app": "db"}, affinity=anti("db")))
    s = make_scheduler(kubeconfig, clock)
    try:
        batches = settle(s, limit=10)
    finally:
        s.stop()
    assert len(batches) == 1 and Counter(o.status for o in batches[0].pods) == {"bound": 5}
    taken: list[str] = []
    events = scheduled_events(api)
    for o in batches[0].pods:  # queue order
        assert o.runner_up is not None and o.runner_up != o.node and o.runner_up not in taken, (o, taken)
        assert f"runner-up {o.runner_up}," in events[o.key.split("/")[1]]
        taken.append(o.node)
    [empty] = {f"n{i}" for i in range(6)} - set(taken)
    assert batches[0].pods[-1].runner_up == empty


def test_the_runner_up_of_a_zone_anti_affine_replica_is_in_its_own_zone(api, kubeconfig, clock):
    """Two zone-anti-affine replicas over two zones of two nodes each: the second one's other usable
    node is the one beside it; the first replica's zone bars the other two."""
    for z in "ab":
        for k in range(2):
            api.add_node(make_node(f"{z}{k}", cpu="16", zone=z))
    for i in range(2):
        api.add_pod(make_pod(f"r{i}", cpu="1", scheduler="iro", labels={"app": "db"}, affinity=anti("db", ZONE)))
    s = make_scheduler(kubeconfig, clock)
    try:
        [batch] = settle(s, limit=10)
    finally:
        s.stop()
    first, second = batch.pods
    assert first.status == second.status == "bound" and first.node[0] != second.node[0]
    assert second.runner_up is not None and second.runner_up[0] == second.node[0] and second.runner_up != second.node


def test_the_batch_score_is_that_of_the_placement_as_bound(api, kubeconfig, clock):
    """The solver stacked anti-affine replicas; the batch check moved some. BatchResult.score is R
    of the placement bound (evaluate), not the solver's score of the one it returned."""
    for i in range(6):
        api.add_node(make_node(f"n{i}", cpu="16"))
    for i in range(4):
        api.add_pod(make_pod(f"r{i}", cpu="1", scheduler="iro", labels={"app": "db"}, affinity=anti("db")))
    s = make_scheduler(kubeconfig, clock)
    got = solves(s)
    try:
        batch = cycle(s)
    finally:
        s.stop()
    [(problem, placement)] = got
    assert Counter(o.status for o in batch.pods) == {"bound": 4}
    index = {n.name: i for i, n in enumerate(problem.nodes)}
    names = [w.name for w in problem.workloads]
    bound = [index[next(o.node for o in batch.pods if o.key == name)] for name in names]
    assert bound != placement.assignment.tolist()  # the check moved some
    assert batch.score == evaluate(problem, np.array(bound)).score
    assert batch.score != placement.objective.score


def test_a_pod_with_affinity_to_a_batch_mate_is_bound_with_it_in_one_batch(api, kubeconfig, clock):
    """web's affinity target (cache, first in the queue) is in its batch: the snapshot refused web
    everywhere; it is placed after cache, in cache's zone, and bound in the same batch, its Event's
    runner-up in that zone too. Before: deferred to a second batch."""
    api.add_node(make_node("a0", cpu="4", zone="a"))
    api.add_node(make_node("a1", cpu="4", zone="a"))
    api.add_node(make_node("b0", cpu="16", zone="b"))
    api.add_pod(make_pod("cache", cpu="1", scheduler="iro", labels={"app": "cache"}, node_selector={ZONE: "a"}, priority=5))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro", labels={"app": "web"}, affinity=affinity("cache")))
    s = make_scheduler(kubeconfig, clock)
    try:
        batches = settle(s)
    finally:
        s.stop()
    assert len(batches) == 1
    outcomes = {o.key: o for o in batches[0].pods}
    assert {k: o.status for k, o in outcomes.items()} == {"default/cache": "bound", "default/web": "bound"}
    assert node_of(api, "web") in ("a0", "a1") and node_of(api, "cache") in ("a0", "a1")
    web = outcomes["default/web"]  # its other usable node: the other one of zone a (b0: no cache in zone b)
    assert {web.node, web.runner_up} == {"a0", "a1"} and web.gap is not None
    assert "default/web to a" in scheduled_events(api)["web"]
    assert not [e for e in api.list("events") if e["reason"] == "FailedScheduling"]


def test_a_pod_waiting_on_a_batch_mate_with_no_node_that_passes_is_still_deferred(api, kubeconfig, clock):
    """cache fills the one node of zone a: web, which must join it, has no node that passes; it is
    left for the next batch (then unschedulable: no room in zone a)."""
    api.add_node(make_node("a0", cpu="1", zone="a"))
    api.add_node(make_node("b0", cpu="16", zone="b"))
    api.add_pod(make_pod("cache", cpu="1", scheduler="iro", labels={"app": "cache"}, node_selector={ZONE: "a"}, priority=5))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro", labels={"app": "web"}, affinity=affinity("cache")))
    s = make_scheduler(kubeconfig, clock)
    try:
        first, second = settle(s)
    finally:
        s.stop()
    assert {o.key: o.status for o in first.pods} == {"default/cache": "bound", "default/web": "deferred"}
    assert {o.key: o.status for o in second.pods} == {"default/web": "unschedulable"}
    assert node_of(api, "web") is None


def test_a_deferred_pod_is_never_kept_for_the_pods_waiting_on_it(api, kubeconfig, clock):
    """d (zone spread) is deferred by the batch check; w's required zone affinity names d: w must
    not be bound beside a pod that is not bound (it was bound on n1, and the batch score counted d)."""


    api.add_node(make_node("n1", cpu="16", labels={ZONE: "z1"}))
    api.add_node(make_node("n2", cpu="16", labels={ZONE: "z2"}))
    api.add_node(make_node("n3", cpu="16", labels={ZONE: "z2"}))
    api.add_pod(make_pod("x", cpu="1", node="n1", labels={"app": "web"}))
    for name in ("a", "b", "d"):
        labels = {"app": "web", **({"role": "leader"} if name == "d" else {})}
        api.add_pod(make_pod(name, cpu="1", scheduler="iro", labels=labels, topology_spread=spread("web")))
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "leader"}}, "topologyKey": ZONE}]}}
    api.add_pod(make_pod("w", cpu="1", scheduler="iro", labels={"app": "follower"}, affinity=aff))
    s = make_scheduler(kubeconfig, clock)
    try:
        relist(s)
        batch = s.schedule_batch(s.ready_pods())
    finally:
        s.stop()
    status = {o.key.split("/")[1]: o.status for o in batch.pods}
    assert status["d"] == "deferred"
    assert node_of(api, "d") is None and node_of(api, "w") is None
    assert status["w"] != "bound"
