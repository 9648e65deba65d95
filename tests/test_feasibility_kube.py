"""Feasibility against Kubernetes' rules, one rule at a time on tiny hand-built clusters:
tolerations (k8s.io/api/core/v1 ToleratesTaint), TaintToleration's effects and message,
nodeSelector, required node affinity (through the pod reader), resources, GPU cards and models,
latency bounds, and the order in which a node's failing filters are reported."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed import ClusterState, problem_from_dict
from iro_fed.feasibility import check_placement, explain, feasible_matrix, feasible_nodes
from iro_fed.k8s.snapshot import build_snapshot
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import Taint, Toleration


def fits(nodes, workload, **extra) -> list[bool]:
    problem = problem_from_dict({"domains": [{"name": "d"}], "nodes": nodes,
                                 "workloads": [dict({"name": "p", "requests": {"cpu": 100}}, **workload)], **extra})
    state = ClusterState(problem)
    mask = feasible_nodes(state, 0)
    assert (feasible_matrix(problem, state)[0] == mask).all()
    return mask.tolist()


def node(name: str, **fields) -> dict:
    return dict({"name": name, "domain": "d", "capacity": {"cpu": 4000, "memory": 4096}}, **fields)


# --- taints and tolerations ---------------------------------------------------------------

TAINT = Taint("dedicated", "batch", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (Toleration("dedicated", "Equal", "batch", "NoSchedule"), True),
        (Toleration("dedicated", "Equal", "batch", ""), True),  # empty effect matches every effect
        (Toleration("dedicated", "Equal", "batch", "NoExecute"), False),  # effect must match
        (Toleration("dedicated", "Equal", "gpu", "NoSchedule"), False),  # value must match
        (Toleration("dedicated", "Equal", "", ""), False),  # Equal with no value is value ""
        (Toleration("other", "Equal", "batch", ""), False),  # key must match
        (Toleration("dedicated", "Exists", "", ""), True),  # any value of the key
        (Toleration("dedicated", "Exists", "", "PreferNoSchedule"), False),
        (Toleration("", "Exists", "", ""), True),  # empty key with Exists: every taint
        (Toleration("", "Exists", "", "NoSchedule"), True),
        (Toleration("", "Exists", "", "NoExecute"), False),
    ],
)
def test_toleration_matches_like_kubernetes(toleration, tolerated):
    assert toleration.tolerates(TAINT) is tolerated


def test_equal_toleration_of_an_empty_value():
    assert Toleration("spot", "Equal", "", "").tolerates(Taint("spot", "", "NoExecute"))
    assert not Toleration("spot", "Equal", "", "").tolerates(Taint("spot", "yes", "NoExecute"))


def test_noschedule_and_noexecute_filter_prefernoschedule_does_not():
    nodes = [
        node("ns", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
        node("ne", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}]),
        node("pn", taints=[{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]),
        node("two", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "z", "effect": "NoSchedule"}]),
    ]
    assert fits(nodes, {}) == [False, False, True, False]
    only_noschedule = [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]
    assert fits(nodes, {"tolerations": only_noschedule}) == [True, False, True, False]  # "two" keeps z
    both = only_noschedule + [{"key": "z", "operator": "Exists"}]
    assert fits(nodes, {"tolerations": both}) == [True, False, True, True]
    assert fits(nodes, {"tolerations": [{"operator": "Exists"}]}) == [True, True, True, True]


def test_taint_message_names_the_nodes_first_untolerated_taint():
    # kube-scheduler (FindMatchingUntoleratedTaint) walks the node's taints in its order.
    problem = problem_from_dict({
        "domains": [{"name": "d"}],
        "nodes": [node("n0", taints=[{"key": "zone", "value": "b"}, {"key": "app", "value": "a"}])],
        "workloads": [{"name": "p", "requests": {"cpu": 100}}],
    })
    assert explain(ClusterState(problem), 0) == "0/1 nodes are available: 1 node(s) had untolerated taint {zone: b}."


def test_taint_is_reported_before_selector_and_allowed_domains():
    problem = problem_from_dict({
        "domains": [{"name": "d"}, {"name": "e"}],
        "nodes": [node("n0", taints=[{"key": "k", "value": "v"}]), node("n1", domain="e")],
        "workloads": [{"name": "p", "requests": {"cpu": 100}, "allowed_domains": ["e"], "node_selector": {"tier": "gold"}}],
    })
    assert explain(ClusterState(problem), 0) == (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {k: v}."
    )


# --- node selector and required node affinity ---------------------------------------------


def test_node_selector_needs_every_label_with_its_value():
    nodes = [
        node("a", labels={"tier": "gold", "disk": "ssd"}),
        node("b", labels={"tier": "gold"}),
        node("c", labels={"tier": "silver", "disk": "ssd"}),
        node("d", labels={"tier": "", "disk": "ssd"}),
    ]
    assert fits(nodes, {"node_selector": {"tier": "gold", "disk": "ssd"}}) == [True, False, False, False]
    assert fits(nodes, {"node_selector": {"tier": ""}}) == [False, False, False, True]  # present, empty value
    assert fits(nodes, {"node_selector": {"gpu": "yes"}}) == [False, False, False, False]


def _affinity(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(
    ("expressions", "expected"),
    [
        ([{"key": "disk", "operator": "In", "values": ["ssd", "nvme"]}], [True, True, False, False]),
        ([{"key": "disk", "operator": "NotIn", "values": ["ssd"]}], [False, True, True, True]),  # absent label matches
        ([{"key": "disk", "operator": "Exists"}], [True, True, True, False]),
        ([{"key": "disk", "operator": "DoesNotExist"}], [False, False, False, True]),
        ([{"key": "gen", "operator": "Gt", "values": ["3"]}], [True, False, False, False]),  # 4 > 3; 3 is not; "x" no int
        ([{"key": "gen", "operator": "Lt", "values": ["4"]}], [False, True, False, False]),  # no label: no match
        ([{"key": "disk", "operator": "Exists"}, {"key": "gen", "operator": "Gt", "values": ["2"]}], [True, True, False, False]),
    ],
)
def test_required_node_affinity_operators(expressions, expected):
    nodes = [
        make_node("n0", labels={"disk": "ssd", "gen": "4"}),
        make_node("n1", labels={"disk": "nvme", "gen": "3"}),
        make_node("n2", labels={"disk": "hdd", "gen": "x"}),
        make_node("n3"),
    ]
    snap = build_snapshot(nodes, [], [make_pod("p", affinity=_affinity({"matchExpressions": expressions}))])
    assert feasible_nodes(ClusterState(snap.problem), 0).tolist() == expected


def test_required_node_affinity_terms_are_ored_and_anded_with_the_selector():
    nodes = [make_node("n0", labels={"disk": "ssd", "tier": "gold"}), make_node("n1", labels={"disk": "hdd", "tier": "gold"}),
             make_node("n2", labels={"disk": "hdd"})]
    terms = ({"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
             {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]})
    snap = build_snapshot(nodes, [], [make_pod("p", affinity=_affinity(*terms)),
                                      make_pod("q", affinity=_affinity(*terms), node_selector={"tier": "gold"}),
                                      make_pod("r", affinity=_affinity({"matchExpressions": []}))])
    state = ClusterState(snap.problem)
    assert feasible_nodes(state, 0).tolist() == [True, True, True]
    assert feasible_nodes(state, 1).tolist() == [True, True, False]
    assert feasible_nodes(state, 2).tolist() == [False, False, False]  # an empty term matches nothing


# --- resources and GPUs -----------------------------------------------------------------


def test_resources_fit_up_to_exactly_what_is_free():
    nodes = [node("n0", allocated={"cpu": 1000, "memory": 1024})]
    assert fits(nodes, {"requests": {"cpu": 3000, "memory": 3072}}) == [True]
    assert fits(nodes, {"requests": {"cpu": 3001, "memory": 3072}}) == [False]
    assert fits(nodes, {"requests": {"cpu": 3000, "memory": 3073}}) == [False]


def test_gpu_share_needs_one_card_with_enough_free_milli():
    nodes = [
        node("split", gpus=2, gpu_model="T4", gpu_free_milli=[250, 300]),  # 550 free in total, no card has 400
        node("one", gpus=1, gpu_model="T4", gpu_free_milli=[400]),
        node("cpu"),
    ]
    assert fits(nodes, {"gpu": {"count": 1, "milli": 300}}) == [True, True, False]
    assert fits(nodes, {"gpu": {"count": 1, "milli": 400}}) == [False, True, False]
    assert fits(nodes, {"gpu": {"count": 1, "milli": 401}}) == [False, False, False]
    assert fits(nodes, {"gpu": {"count": 1, "milli": 1000}}) == [False, False, False]  # a whole card


def test_k_gpus_need_k_fully_free_cards():
    nodes = [
        node("a", gpus=3, gpu_model="T4", gpu_free_milli=[1000, 999, 1000]),
        node("b", gpus=2, gpu_model="T4", gpu_free_milli=[1000, 999]),
        node("c", gpus=4, gpu_model="V100M32"),
    ]
    assert fits(nodes, {"gpu": {"count": 2}}) == [True, False, True]
    assert fits(nodes, {"gpu": {"count": 3}}) == [False, False, True]
    assert fits(nodes, {"gpu": {"count": 1}}) == [True, True, True]
    assert fits(nodes, {"gpu": {"count": 2, "models": ["T4"]}}) == [True, False, False]
    assert fits(nodes, {"gpu": {"count": 1, "models": ["A100"]}}) == [False, False, False]  # no such model here


def test_gpu_model_reason_and_card_rules_in_check_placement():
    problem = problem_from_dict({
        "domains": [{"name": "d"}],
        "nodes": [node("t4", gpus=2, gpu_model="T4", gpu_free_milli=[1000, 600]), node("cpu")],
        "workloads": [{"name": "p", "requests": {"cpu": 100}, "gpu": {"count": 1, "milli": 500, "models": ["V100M32"]}},
                      {"name": "q", "requests": {"cpu": 100}, "gpu": {"count": 2}},
                      {"name": "s", "requests": {"cpu": 100}, "gpu": {"count": 1, "milli": 600}}],
    })
    state = ClusterState(problem)
    assert explain(state, 0) == "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't have an allowed GPU model."
    assert check_placement(problem, np.array([-1, 0, -1]), {1: (0, 1)}) == [
        "node t4: GPU card 1 over capacity (1000 milli > 600 free)"]
    assert check_placement(problem, np.array([-1, -1, 0]), {2: (1,)}) == []  # 600 on the card with 600 free
    assert "needs 2 distinct GPU card(s)" in check_placement(problem, np.array([-1, 0, -1]), {1: (0, 0)})[0]


# --- latency bound ------------------------------------------------------------------------


def test_latency_bound_is_inclusive_and_unknown_latency_fails():
    problem = problem_from_dict({
        "domains": [{"name": "edge"}, {"name": "az"}, {"name": "cloud"}],
        "latency_ms": {"users": {"edge": 3.0, "az": 25.0}},
        "nodes": [node("e", domain="edge"), node("a", domain="az"), node("c", domain="cloud")],
        "workloads": [{"name": "p", "requests": {"cpu": 100}, "user_region": "users", "max_latency_ms": 25},
                      {"name": "q", "requests": {"cpu": 100}, "user_region": "users", "max_latency_ms": 24.9},
                      {"name": "r", "requests": {"cpu": 100}, "user_region": "users"}],
    })
    state = ClusterState(problem)
    assert feasible_nodes(state, 0).tolist() == [True, True, False]
    assert feasible_nodes(state, 1).tolist() == [True, False, False]
    assert feasible_nodes(state, 2).tolist() == [True, True, True]  # no bound: unknown latency is fine


# --- the batch filter ----------------------------------------------------------------------


def test_batch_filter_skips_resources_a_pod_does_not_request():
    # An overcommitted node (e.g. allocatable shrank under running pods) still takes a pod that
    # requests none of the short resource, as NodeResourcesFit and feasible_nodes say.
    problem = problem_from_dict({
        "domains": [{"name": "d"}],
        "nodes": [node("n0")],
        "workloads": [{"name": "p", "requests": {"cpu": 100}}, {"name": "q", "requests": {"cpu": 100, "memory": 1}}],
    })
    problem = problem.with_cluster(np.array([[0.0, 5000.0]]), problem.gpu_free)  # memory 5000 of 4096
    state = ClusterState(problem)
    assert feasible_nodes(state, 0).tolist() == [True] and feasible_nodes(state, 1).tolist() == [False]
    assert feasible_matrix(problem, state).tolist() == [[True], [False]]
