"""The review of the pod-scoring change (m6): node inclusion policies apart, pod scoring built only
for a solver that reads it, rows and domain counts reused, the extender's assumed pods counted."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import solvers
from iro_fed.feasibility import feasible_nodes
from iro_fed.k8s.snapshot import ClusterModel, build_snapshot
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState
from solvers import reads_pod_scoring

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def _spread_scores(snap) -> dict[str, int]:
    p = snap.problem
    s = solvers.make("kube-default")
    s.reset(p)
    state = ClusterState(p)
    cand = s.candidates(state, 0)
    return {p.nodes[n].name: int(v) for n, v in zip(cand, s.plugin_scores(state, 0, cand)["PodTopologySpread"], strict=True)}


# --- 1. nodeTaintsPolicy Honor without nodeAffinityPolicy Honor -------------------------------------


@pytest.mark.parametrize("affinity_policy", ["Honor", "Ignore"])
def test_taints_policy_honor_leaves_out_the_tainted_node_whatever_the_affinity_policy(affinity_policy):
    # /tmp/r7/taint.py: a2 (zone a) is tainted and holds 3 matching pods; with nodeTaintsPolicy Honor
    # they are not counted (upstream matchNodeInclusionPolicies checks the policies apart), so zones
    # a and b both count 0. Ignore + Honor dropped the taints: {'a1': 0, 'b1': 100}.
    nodes = [make_node("a1", zone="a"), make_node("a2", zone="a", taints=[{"key": "x", "value": "y", "effect": "NoSchedule"}]),
             make_node("b1", zone="b")]
    bound = [make_pod(f"w{i}", node="a2", labels={"app": "web"}) for i in range(3)]
    c = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}},
         "nodeTaintsPolicy": "Honor", "nodeAffinityPolicy": affinity_policy}
    snap = build_snapshot(nodes, bound, [make_pod("p", labels={"app": "web"}, topology_spread=[c])])
    assert _spread_scores(snap) == {"a1": 100, "b1": 100}
    assert snap.problem.pod_scoring.topology.tolist() == [[0, -1, 1]]


def test_affinity_policy_ignore_with_taints_ignored_counts_every_node():
    nodes = [make_node("a1", zone="a", labels={"disk": "ssd"}), make_node("a2", zone="a"), make_node("b1", zone="b", labels={"disk": "ssd"})]
    bound = [make_pod(f"w{i}", node="a2", labels={"app": "web"}) for i in range(3)]
    c = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}},
         "nodeAffinityPolicy": "Ignore"}
    pending = make_pod("p", labels={"app": "web"}, topology_spread=[c], node_selector={"disk": "ssd"})
    scores = _spread_scores(build_snapshot(nodes, bound, [pending]))
    assert scores["b1"] == 100 and scores["a1"] < 100  # a2's pods count for zone a (its selector ignored)


# --- 3. pod scoring only for a solver that reads it ---------------------------------------------------


def test_reads_pod_scoring_looks_into_composite_solvers():
    assert reads_pod_scoring(solvers.make("kube-default"))
    assert not reads_pod_scoring(solvers.make("best-fit"))
    assert reads_pod_scoring(solvers.make("fallback", primary="best-fit", fallback="kube-default"))
    assert not reads_pod_scoring(solvers.make("fallback", primary="best-fit", fallback="first-fit"))
    assert reads_pod_scoring(solvers.make("best-fit"), solvers.make("kube-default"))
    assert not reads_pod_scoring(None)


def _cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [make_node(f"n{i}", zone=f"z{i % 3}", labels={"rack": f"r{i % 2}"}) for i in range(9)]
    bound = []
    for i in range(9):
        pod = make_pod(f"b{i}", "100m", "128Mi", node=f"n{i}", labels={"app": f"a{i % 2}"})
        pod["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": "rs", "controller": True}]
        bound.append(pod)
    return nodes, bound


def _pending(name: str) -> dict[str, Any]:
    pod = make_pod(name, labels={"app": "a1"}, affinity={"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "a0"}}, "topologyKey": "rack"}}]}})
    pod["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": "rs", "controller": True}]
    return pod


def test_with_pods_without_scoring_builds_none_and_does_not_walk_the_bound_pods():
    nodes, bound = _cluster()
    model = ClusterModel(nodes, bound)
    assert model.with_pods([_pending("p")], scoring=False).problem.pod_scoring is None
    assert model._bound_scoring is None  # nothing counted the bound pods for scoring
    assert model.with_pods([_pending("p")]).problem.pod_scoring is not None


def test_a_models_kept_rows_give_the_same_pod_scoring_as_a_fresh_model():
    nodes, bound = _cluster()
    model = ClusterModel(nodes, bound)
    first = model.with_pods([_pending("p")]).problem.pod_scoring
    again = model.with_pods([_pending("q"), _pending("r")]).problem.pod_scoring
    fresh = ClusterModel(nodes, bound).with_pods([_pending("q"), _pending("r")]).problem.pod_scoring
    for got in (again, fresh):
        assert got.topology_keys == first.topology_keys
        assert np.array_equal(got.topology, first.topology)
        assert np.array_equal(got.group_counts, first.group_counts)
    assert again.terms == fresh.terms and np.array_equal(again.members, fresh.members)


def test_kept_domain_counts_follow_placements_and_removals():
    nodes, bound = _cluster()
    pending = [_pending(f"p{i}") for i in range(6)]
    snap = ClusterModel(nodes, bound).with_pods(pending)
    p = snap.problem
    s = solvers.make("kube-default", seed=2)
    s.reset(p)
    state = ClusterState(p)
    for w in range(4):
        cand = s.candidates(state, w)
        s.plugin_scores(state, w, cand)  # (counts the domains it reads)
        state.place(w, int(cand[w % cand.size]))
    state.remove(1)
    s.sync(state)
    fresh = solvers.make("kube-default", seed=2)
    fresh.reset(p)
    fresh.sync(state)
    assert s._domains  # something was kept
    for (g, t), counts in s._domains.items():
        assert np.array_equal(counts, fresh._domain_counts(g, t)), (g, t)


# --- 2. the webhook's model widens without a rebuild --------------------------------------------------


def _node(name: str, cpu: str, pods: str = "110", extra: dict[str, str] | None = None) -> dict[str, Any]:
    n = make_node(name, cpu=cpu, pods=pods)
    n["status"]["allocatable"].update(extra or {})
    n["status"]["capacity"] = dict(n["status"]["allocatable"])
    return n


def _wide_cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [_node("n1", "64", pods="2"), _node("n2", "4", extra={"example.com/fpga": "2"}),
             _node("n3", "4", extra={"example.com/fpga": "1", "example.com/dsp": "lots"})]
    fpga_user = make_pod("u", "100m", "10Mi", node="n3")
    fpga_user["spec"]["containers"][0]["resources"]["requests"]["example.com/fpga"] = "1"
    bound = [make_pod("b1", "100m", "10Mi", node="n1"), make_pod("b2", "100m", "10Mi", node="n1"), fpga_user]
    return nodes, bound


def _asking(name: str, **requests: str) -> dict[str, Any]:
    pod = make_pod(name, "100m", "10Mi")
    pod["spec"]["containers"][0]["resources"]["requests"].update(requests)
    return pod


@pytest.mark.parametrize("requests", [{}, {"example.com/fpga": "1"}, {"example.com/asic": "1"}])
def test_a_wide_model_widens_by_replacing_arrays_as_a_rebuilt_model_would(monkeypatch, requests):
    nodes, bound = _wide_cluster()
    pod = _asking("p", **requests)
    model = ClusterModel(nodes, bound, wide=True)
    rebuilt = ClusterModel(nodes, bound, pending=[pod])  # what for_pods built in the review before
    built = []
    init = ClusterModel.__init__
    monkeypatch.setattr(ClusterModel, "__init__", lambda self, *a, **k: built.append(1) or init(self, *a, **k))
    wide = model.for_pods([pod])
    assert built == []  # no model built from the objects in the review
    assert wide is not model and model.for_pods([pod]) is wide
    got, want = wide.problem, rebuilt.problem
    assert got.resources == want.resources and got.feasibility_only == want.feasibility_only
    assert np.array_equal(got.capacity, want.capacity) and np.array_equal(got.allocated, want.allocated)
    a = wide.with_pods([pod]).problem
    b = rebuilt.with_pods([pod]).problem
    assert np.array_equal(a.demand, b.demand) and np.array_equal(a.capacity, b.capacity)
    assert solvers.make("kube-default").solve(a).assignment.tolist() == solvers.make("kube-default").solve(b).assignment.tolist()


def test_a_wide_model_keeps_too_many_pods_and_extended_resources_binding():
    nodes, bound = _wide_cluster()
    model = ClusterModel(nodes, bound, wide=True)
    plain, fpga = _asking("p"), _asking("f", **{"example.com/fpga": "1"})
    # n1 is the emptiest by cpu but full of pods; only n2 has an FPGA free (n3's one is taken)
    for pod, want in ((plain, {"n2", "n3"}), (fpga, {"n2"})):
        snap = model.for_pods([pod]).with_pods([pod])
        state = ClusterState(snap.problem)
        assert {snap.problem.nodes[i].name for i in np.flatnonzero(feasible_nodes(state, 0))} == want


def test_a_bad_quantity_of_a_resource_no_pod_asked_for_fails_no_review():
    # n3's example.com/dsp is "lots": a pod asking for it gets no node there (and a warning), where the
    # rebuild in the review raised for every pod asking for it
    nodes, bound = _wide_cluster()
    model = ClusterModel(nodes, bound, wide=True)
    assert any("example.com/dsp" in w for w in model.warnings)
    pod = _asking("d", **{"example.com/dsp": "1"})
    snap = model.for_pods([pod]).with_pods([pod])
    assert not feasible_nodes(ClusterState(snap.problem), 0).any()
