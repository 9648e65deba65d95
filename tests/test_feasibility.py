"""Filters, their reasons in kube-scheduler's words, the batch filter and the placement check."""

from __future__ import annotations

import numpy as np

from iro_fed import ClusterState, problem_from_dict
from iro_fed.feasibility import check_placement, explain, feasible_matrix, feasible_nodes
from iro_fed.testing import random_problem


def doc(workload):
    return {
        "domains": [{"name": "edge"}, {"name": "az"}],
        "latency_ms": {"users": {"edge": 3.0, "az": 40.0}},
        "nodes": [
            {"name": "e0", "domain": "edge", "capacity": {"cpu": 2000, "memory": 4096}, "labels": {"tier": "gold"}},
            {"name": "a0", "domain": "az", "capacity": {"cpu": 16000, "memory": 65536}, "gpus": 2, "gpu_model": "T4",
             "gpu_free_milli": [300, 1000]},
            {"name": "a1", "domain": "az", "capacity": {"cpu": 16000, "memory": 65536}, "gpus": 4, "gpu_model": "V100M32",
             "gpu_free_milli": [1000, 1000, 1000, 600],
             "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]},
            {"name": "a2", "domain": "az", "capacity": {"cpu": 16000, "memory": 65536}, "labels": {"tier": "gold"},
             "taints": [{"key": "spot", "value": "", "effect": "PreferNoSchedule"}]},
        ],
        "workloads": [dict({"name": "p", "requests": {"cpu": 500, "memory": 512}}, **workload)],
    }


def mask(workload):
    problem = problem_from_dict(doc(workload))
    state = ClusterState(problem)
    return feasible_nodes(state, 0).tolist(), explain(state, 0)


def test_plain_pod_avoids_untolerated_noschedule_taint():
    fits, reason = mask({})
    assert fits == [True, True, False, True]  # PreferNoSchedule does not filter
    assert reason == "3/4 nodes are available: 1 node(s) had untolerated taint {dedicated: batch}."


def test_toleration_lifts_the_taint():
    fits, _ = mask({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]})
    assert fits == [True, True, True, True]
    fits, _ = mask({"tolerations": [{"operator": "Exists"}]})
    assert fits == [True, True, True, True]
    fits, _ = mask({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "other"}]})
    assert fits == [True, True, False, True]


def test_node_selector_and_allowed_domains():
    fits, reason = mask({"node_selector": {"tier": "gold"}})
    assert fits == [True, False, False, True]
    assert "2 node(s) didn't match Pod's node affinity/selector" not in reason  # a1 fails on its taint first
    assert "1 node(s) didn't match Pod's node affinity/selector" in reason
    fits, reason = mask({"allowed_domains": ["edge"]})
    assert fits == [True, False, False, False]
    # a1 fails on its taint first here too (TaintToleration runs before NodeAffinity, where a
    # domain restriction would be in Kubernetes).
    assert reason == (
        "1/4 nodes are available: 1 node(s) had untolerated taint {dedicated: batch}, "
        "2 node(s) were not in the pod's allowed domains."
    )


def test_latency_bound():
    fits, reason = mask({"user_region": "users", "max_latency_ms": 10})
    assert fits == [True, False, False, False]
    assert "node(s) exceeded max latency 10 ms from users" in reason


def test_gpu_share_needs_one_card_with_enough_milli():
    fits, _ = mask({"gpu": {"count": 1, "milli": 300}, "tolerations": [{"operator": "Exists"}]})
    assert fits == [False, True, True, False]
    fits, _ = mask({"gpu": {"count": 1, "milli": 700}, "tolerations": [{"operator": "Exists"}]})
    assert fits == [False, True, True, False]  # a0 card 1 is free, a1 cards 0..2
    fits, reason = mask({"gpu": {"count": 1, "milli": 700, "models": ["V100M32"]}})
    assert fits == [False, False, False, False]
    assert reason == (
        "0/4 nodes are available: 1 node(s) didn't have an allowed GPU model, 1 node(s) had untolerated taint "
        "{dedicated: batch}, 2 Insufficient nvidia.com/gpu."
    )


def test_whole_gpus_need_fully_free_cards():
    tol = {"tolerations": [{"operator": "Exists"}]}
    fits, _ = mask({"gpu": {"count": 2}, **tol})
    assert fits == [False, False, True, False]  # a0 has one full card
    fits, _ = mask({"gpu": {"count": 4}, **tol})
    assert fits == [False, False, False, False]


def test_insufficient_resources_count_each_resource():
    fits, reason = mask({"requests": {"cpu": 8000, "memory": 32768}})
    assert fits == [False, True, False, True]
    assert reason == (
        "2/4 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 node(s) had untolerated taint {dedicated: batch}."
    )


def test_batch_filter_matches_single_filters():
    for seed in range(6):
        problem = random_problem(seed, nodes=10, pods=15)
        state = ClusterState(problem)
        matrix = feasible_matrix(problem, state)
        for w in range(problem.num_workloads):
            assert (matrix[w] == feasible_nodes(state, w)).all()


def test_check_placement_finds_violations():
    problem = problem_from_dict(doc({"requests": {"cpu": 1500, "memory": 512}}))
    assert check_placement(problem, np.array([0]), {}) == []
    two = problem_from_dict(
        dict(doc({}), workloads=[{"name": f"p{i}", "requests": {"cpu": 1500, "memory": 512}} for i in range(2)])
    )
    errors = check_placement(two, np.array([0, 0]), {})
    assert errors == ["node e0: cpu over capacity (3000 > 2000)"]
    assert "violates a static constraint" in check_placement(problem, np.array([2]), {})[0]
    gpu = problem_from_dict(doc({"gpu": {"count": 1, "milli": 500}}))
    assert check_placement(gpu, np.array([1]), {0: (0,)}) == ["node a0: GPU card 0 over capacity (500 milli > 300 free)"]
    assert "needs 1 distinct GPU card(s)" in check_placement(gpu, np.array([1]), {})[0]
