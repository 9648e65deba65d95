"""The snapshot tidy (U1): the pod scoring's kept order of the bound pods' terms gives the same
``PodScoring`` as a fresh computation, and ``ClusterModel.for_pods`` widens by
``feasibility_resources``' rule (its memo of the slot check kept)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from iro_fed.k8s.snapshot import (
    BoundScoring,
    ClusterModel,
    _merged_order,
    feasibility_resources,
    pods_by_node,
    score_rules,
)

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def node(i, pods="110", extra=None):
    alloc = {"cpu": "64", "memory": "256Gi", "pods": pods, **(extra or {})}
    return {
        "metadata": {"name": f"n{i}", "labels": {HOST: f"n{i}", ZONE: f"z{i % 3}"}},
        "spec": {},
        "status": {"allocatable": alloc, "capacity": alloc},
    }


def term(match, key, ns=None):
    t = {"labelSelector": {"matchLabels": match}, "topologyKey": key}
    return {**t, "namespaces": ns} if ns else t


def pod(name, app, node_name=None, ns="default", terms=True, requests=None):
    k = int(app[3:])
    spec = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi", **(requests or {})}}}],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1 + k % 2,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": app}},
            }
        ],
    }
    if terms:
        spec["affinity"] = {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1 + k % 100, "podAffinityTerm": term({"app": app}, HOST)}
                ]
            },
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": term({"tier": f"t{k % 4}"}, ZONE, ["default", "other"])}
                ],
                "requiredDuringSchedulingIgnoredDuringExecution": [term({"tier": f"t{k % 3}"}, ZONE)]
                if k % 5 == 0
                else [],
            },
        }
    if node_name:
        spec["nodeName"] = node_name
    meta = {
        "name": name,
        "namespace": ns,
        "uid": f"{ns}/{name}",
        "labels": {"app": app, "tier": f"t{k % 4}"},
        "ownerReferences": [
            {"kind": "ReplicaSet", "name": app, "uid": app, "controller": True, "apiVersion": "apps/v1"}
        ],
    }
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def cluster():
    nodes = [node(i) for i in range(6)]
    bound = [
        pod(f"b{k}", f"app{k % 13}", node_name=f"n{k % 6}", ns="other" if k % 4 == 0 else "default", terms=k % 3 != 1)
        for k in range(60)
    ]
    return nodes, bound


def batches():
    # terms the bound pods hold (app1, app2) and new ones (app40, app41), alone and together
    return [
        [pod("p0", "app1")],
        [pod("p1", "app40"), pod("p2", "app2", ns="other")],
        [pod("p3", "app41", terms=False), pod("p4", "app40"), pod("p5", "app1")],
    ]


def same_scoring(a, b):
    assert (a is None) == (b is None)
    if a is None:
        return
    assert a.topology_keys == b.topology_keys and a.group_names == b.group_names and a.terms == b.terms
    assert a.topology_names == b.topology_names
    for x, y in ((a.topology, b.topology), (a.group_counts, b.group_counts), (a.members, b.members)):
        assert np.array_equal(x, y)


def test_the_kept_order_of_held_terms_is_the_sorted_union():
    nodes, bound = cluster()
    held = ClusterModel(nodes, bound).bound_scoring().held
    assert len(held) > 20
    for batch in batches():
        more = [h for p in batch for h in score_rules(p).held()]
        want = sorted(set(held) | set(more), key=repr)  # the rule pod_scoring sorted by on every request
        kept = _merged_order(_merged_order([], held), more)
        assert [h for _, h in kept] == want
        assert [r for r, _ in kept] == [repr(h) for h in want]


@pytest.mark.parametrize("assumed", [False, True])
def test_cached_and_fresh_pod_scoring_are_identical(assumed):
    nodes, bound = cluster()
    extra = {"n1": [pod("a0", "app40", node_name="n1")], "n2": [pod("a1", "app7", node_name="n2", ns="other")]}
    warm = ClusterModel(nodes, bound)
    for batch in batches():  # the kept order built and reused by the batches before
        warm.with_pods(batch)
    scored = 0
    for batch in batches():
        fresh = ClusterModel(nodes, bound)  # nothing kept yet
        kw = {"assumed": extra} if assumed else {}
        got, want = warm.with_pods(batch, **kw), fresh.with_pods(batch, **kw)
        same_scoring(got.problem.pod_scoring, want.problem.pod_scoring)
        assert got.warnings == want.warnings
        scored += got.problem.pod_scoring is not None
    assert scored == len(batches())
    assert warm.bound_scoring()._held_order is not None  # kept on the model's bound pods


def test_plus_keeps_its_own_order():
    nodes, bound = cluster()
    bs = ClusterModel(nodes, bound).bound_scoring()
    kept = bs.held_order()
    both = bs.plus(BoundScoring({"n1": [pod("a0", "app40", node_name="n1")]}, []))
    assert [h for _, h in both.held_order()] == sorted(both.held, key=repr)
    assert bs.held_order() is kept and len(both.held_order()) > len(kept)


@pytest.mark.parametrize("wide", [False, True])
def test_for_pods_widens_by_the_rule_of_feasibility_resources(wide):
    nodes = [node(0, pods="12"), node(1, pods="110", extra={"example.com/fpga": "2"}), node(2, pods="9")]
    bound = [pod(f"b{k}", f"app{k}", node_name=f"n{k % 3}", terms=False) for k in range(20)]
    by_node = pods_by_node(bound)
    fpga = {"example.com/fpga": "1"}
    cases = [
        [],
        [pod("p", "app1")],
        [pod("p", "app1"), pod("q", "app2")],
        [pod("p", "app1", requests=fpga)],
        [pod(f"p{k}", "app1") for k in range(3)],
        [pod(f"p{k}", "app1", requests=fpga) for k in range(5)],
    ]
    for _ in range(2):  # the second time from the model's memo of the slot check
        model = ClusterModel(nodes, bound, wide=wide)
        for pods in itertools.chain(cases, cases):
            want = feasibility_resources(model.config.resources, nodes, by_node, pods)
            got = model.for_pods(pods)
            assert got.config.resources == want
            assert (got is model) == (want == tuple(model.config.resources))
    assert set(model._short_of_slots) == {1, 2, 3, 5}
